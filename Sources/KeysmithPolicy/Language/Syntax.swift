/// Where something is in a policy or schema file: the file's name, a line and a column (both
/// from 1; columns count characters).
public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
    /// The file's name as given to the parser (`<string>` for text not from a file).
    public var file: String
    /// The line, from 1.
    public var line: Int
    /// The column, from 1, in characters.
    public var column: Int

    /// A location.
    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }

    /// `file:line:column`, as compilers print it.
    public var description: String { "\(file):\(line):\(column)" }
}

/// One piece of a `like` pattern: literal text, or `*` (any run of characters).
enum PatternElement: Sendable, Hashable {
    case literal(Unicode.Scalar)
    case wildcard
}

/// The four request variables.
enum Variable: String, Sendable {
    case principal, action, resource, context
}

enum BinaryOperator: String, Sendable {
    case equal = "==", notEqual = "!=", less = "<", lessEqual = "<=", greater = ">", greaterEqual = ">="
    case add = "+", subtract = "-", multiply = "*", `in` = "in", and = "&&", or = "||"
}

/// An expression in a condition, with the span of source text it came from.
struct Expression: Sendable {
    indirect enum Kind: Sendable {
        case literal(PolicyValue)
        case variable(Variable)
        case not(Expression)
        case negate(Expression)
        case binary(BinaryOperator, Expression, Expression)
        case ifThenElse(Expression, Expression, Expression)
        case has(Expression, String)
        case like(Expression, [PatternElement])
        case isType(Expression, String, in: Expression?)
        case attribute(Expression, String)
        case method(Expression, String, [Expression])
        case call(String, [Expression])
        case set([Expression])
        case record([(String, Expression)])
    }

    /// How an expression keeps its text. Not a string per expression: a chain of n terms
    /// (`a || b || …`) is n expressions, each spanning the text of those before it, and copies
    /// would take memory and time growing with the square of the chain's length.
    enum Written: Sendable {
        /// A slice of the policy file's text, sharing its storage.
        case source(Substring.UnicodeScalarView)
        /// Its own string (a clause's whole text, kept for explanations).
        case text(String)
        /// Printed when asked (expressions read from the JSON form).
        case printed
    }

    let kind: Kind
    let location: SourceLocation
    private let written: Written
    /// How many levels deep the expression is: 1 for a term, one more than its deepest operand
    /// otherwise. Parsers refuse an expression deeper than ``PolicyParser/maximumDepth``, so
    /// every walk over one (evaluating, checking, printing, releasing) recurses a bounded depth.
    let height: Int

    /// An expression whose text is kept as `written`.
    init(kind: Kind, location: SourceLocation, written: Written) {
        self.kind = kind
        self.location = location
        self.written = written
        self.height = Self.deepestOperand(kind) + 1
    }

    /// A literal from the JSON form, as many levels deep as the text it prints as (a set of
    /// sets is deeper than one term there), printed when asked.
    init(literal value: PolicyValue, height: Int, location: SourceLocation) {
        self.init(kind: .literal(value), location: location, written: .printed, height: height)
    }

    private init(kind: Kind, location: SourceLocation, written: Written, height: Int) {
        self.kind = kind
        self.location = location
        self.written = written
        self.height = height
    }

    /// An expression with its own text.
    init(kind: Kind, location: SourceLocation, text: String) {
        self.init(kind: kind, location: location, written: .text(text))
    }

    /// The expression's text as written (for explanations and errors).
    var text: String {
        switch written {
        case .source(let scalars): String(Substring(scalars))
        case .text(let text): text
        case .printed: PolicyPrinter.print(self)
        }
    }

    /// The same expression keeping its text as a string of its own (for a clause, whose text
    /// every explanation shows).
    func keepingText() -> Expression {
        if case .text = written { return self }
        return Expression(kind: kind, location: location, written: .text(text), height: height)
    }

    /// The expressions directly inside `kind`, in order.
    static func operands(_ kind: Kind) -> [Expression] {
        switch kind {
        case .literal, .variable: []
        case .not(let operand), .negate(let operand), .has(let operand, _), .like(let operand, _), .attribute(let operand, _): [operand]
        case .binary(_, let left, let right): [left, right]
        case .ifThenElse(let condition, let then, let otherwise): [condition, then, otherwise]
        case .isType(let operand, _, let container): [operand] + (container.map { [$0] } ?? [])
        case .method(let receiver, _, let arguments): [receiver] + arguments
        case .call(_, let arguments), .set(let arguments): arguments
        case .record(let fields): fields.map(\.1)
        }
    }

    /// How many expressions this one is made of (itself included), counting at most `limit + 1`.
    func count(upTo limit: Int) -> Int {
        var count = 0
        var pending = [self]
        while let next = pending.popLast(), count <= limit {
            count += 1
            pending += Self.operands(next.kind)
        }
        return count
    }

    private static func deepestOperand(_ kind: Kind) -> Int {
        func deepest(_ operands: [Expression]) -> Int { operands.reduce(0) { max($0, $1.height) } }
        switch kind {
        case .literal, .variable: return 0
        case .not(let operand), .negate(let operand), .has(let operand, _), .like(let operand, _), .attribute(let operand, _):
            return operand.height
        case .binary(_, let left, let right): return max(left.height, right.height)
        case .ifThenElse(let condition, let then, let otherwise): return max(condition.height, then.height, otherwise.height)
        case .isType(let operand, _, let container): return max(operand.height, container?.height ?? 0)
        case .method(let receiver, _, let arguments): return max(receiver.height, deepest(arguments))
        case .call(_, let arguments), .set(let arguments): return deepest(arguments)
        case .record(let fields): return deepest(fields.map(\.1))
        }
    }
}

/// How a policy's head constrains the principal or the resource.
enum EntityConstraint: Sendable {
    case any
    case equal(EntityUID)
    case within(EntityUID)
    case isType(String)
    case isTypeWithin(String, EntityUID)
}

/// How a policy's head constrains the action.
enum ActionConstraint: Sendable {
    case any
    case equal(EntityUID)
    case within([EntityUID])
}

/// A syntax or validation problem, with where it is.
public struct PolicyDiagnostic: Sendable, Hashable, CustomStringConvertible, Error {
    /// Where.
    public var location: SourceLocation
    /// What is wrong, in one sentence.
    public var message: String

    /// A problem at a location.
    public init(location: SourceLocation, message: String) {
        self.location = location
        self.message = message
    }

    /// `file:line:column: message`.
    public var description: String { "\(location): \(message)" }
}

/// Every problem found in one run over a policy, schema, entity or request document.
///
/// Nothing is ever decided from a document that has one.
public struct PolicyDiagnostics: Error, Sendable, CustomStringConvertible {
    /// What kind of input failed.
    public enum Kind: String, Sendable {
        /// Policy text does not parse.
        case syntax
        /// Policies, entities or a request do not agree with the schema.
        case validation
        /// An entity or request document is malformed.
        case input
    }

    /// What kind of input failed.
    public var kind: Kind
    /// Every problem, in file order.
    public var problems: [PolicyDiagnostic]

    /// The problems, one per line.
    public var description: String { problems.map(\.description).joined(separator: "\n") }
}

/// Turns policy or schema text into tokens.
struct Lexer {
    enum Token: Sendable, Equatable {
        case identifier(String)
        case string(String, pattern: [PatternElement])
        case integer(String)
        case symbol(String)
        case annotationStart
        case end
    }

    struct Located: Sendable {
        var token: Token
        var location: SourceLocation
        var start: String.UnicodeScalarView.Index
        var end: String.UnicodeScalarView.Index
    }

    let file: String
    let scalars: String.UnicodeScalarView
    private var index: String.UnicodeScalarView.Index
    private var line = 1
    private var column = 1

    init(text: String, file: String) {
        self.file = file
        self.scalars = text.unicodeScalars
        self.index = scalars.startIndex
    }

    private var location: SourceLocation { SourceLocation(file: file, line: line, column: column) }

    private mutating func advance() {
        if scalars[index] == "\n" {
            line += 1
            column = 1
        } else {
            column += 1
        }
        index = scalars.index(after: index)
    }

    private func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        var position = index
        for _ in 0..<offset {
            guard position < scalars.endIndex else { return nil }
            position = scalars.index(after: position)
        }
        return position < scalars.endIndex ? scalars[position] : nil
    }

    /// Every token, or the first lexical problem (the parser cannot go on past one).
    mutating func tokens() throws(PolicyDiagnostic) -> [Located] {
        var out: [Located] = []
        while true {
            skipSpaceAndComments()
            let start = location
            let startIndex = index
            guard let scalar = peek() else {
                out.append(Located(token: .end, location: start, start: index, end: index))
                return out
            }
            let token: Token
            if scalar == "_" || ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) {
                var name = ""
                while let next = peek(), next == "_" || ("a"..."z").contains(next) || ("A"..."Z").contains(next) || ("0"..."9").contains(next) {
                    name.unicodeScalars.append(next)
                    advance()
                }
                token = .identifier(name)
            } else if ("0"..."9").contains(scalar) {
                var digits = ""
                while let next = peek(), ("0"..."9").contains(next) {
                    digits.unicodeScalars.append(next)
                    advance()
                }
                token = .integer(digits)
            } else if scalar == "\"" {
                // `\*` (a literal star) is an escape of `like` patterns only, as in Cedar.
                token = try string(patternFollows: out.last?.token == .identifier("like"))
            } else if scalar == "@" {
                advance()
                token = .annotationStart
            } else {
                let two = peek(1).map { String(scalar) + String($0) } ?? ""
                if ["==", "!=", "<=", ">=", "&&", "||", "::"].contains(two) {
                    advance()
                    advance()
                    token = .symbol(two)
                } else if "(){}[],;.:<>!+-*=?".unicodeScalars.contains(scalar) {
                    advance()
                    token = .symbol(String(scalar))
                } else {
                    throw PolicyDiagnostic(location: start, message: "unexpected character \(PolicyValue.quoted(String(scalar)))")
                }
            }
            out.append(Located(token: token, location: start, start: startIndex, end: index))
        }
    }

    private mutating func skipSpaceAndComments() {
        while let scalar = peek() {
            if scalar.properties.isWhitespace {
                // Any Unicode white space (a form feed, U+3000, …) separates tokens, as in Cedar.
                advance()
            } else if scalar == "/", peek(1) == "/" {
                // To the end of the line: a line feed or a carriage return, as in Cedar (a
                // comment ended only by a line feed hid what followed a lone \r).
                while let next = peek(), next != "\n", next != "\r" { advance() }
            } else {
                return
            }
        }
    }

    /// A string literal: `\n \r \t \0 \\ \" \' \x7f \u{hex}`, and in a `like` pattern (when
    /// `patternFollows`) `\*`, a literal star; any other star is a wildcard.
    private mutating func string(patternFollows: Bool) throws(PolicyDiagnostic) -> Token {
        let start = location
        advance()
        var value = String.UnicodeScalarView()
        var pattern: [PatternElement] = []
        while true {
            guard let scalar = peek() else { throw PolicyDiagnostic(location: start, message: "a string is not closed") }
            if scalar == "\r" {
                // As in Cedar: a raw carriage return is not kept in a string (write \r).
                throw PolicyDiagnostic(location: location, message: "a string cannot hold a raw carriage return: write \\r")
            }
            advance()
            if scalar == "\"" { break }
            if scalar == "\\" {
                let escapeLocation = location
                guard let escape = peek() else { throw PolicyDiagnostic(location: start, message: "a string is not closed") }
                advance()
                let decoded: Unicode.Scalar
                switch escape {
                case "n": decoded = "\n"
                case "r": decoded = "\r"
                case "t": decoded = "\t"
                case "0": decoded = "\0"
                case "x":
                    // Two hex digits naming an ASCII character (at most 7F), as in Cedar.
                    var code: UInt8 = 0
                    for _ in 0..<2 {
                        guard let digit = peek(), digit.properties.isASCIIHexDigit, let value = UInt8(String(digit), radix: 16) else {
                            throw PolicyDiagnostic(location: escapeLocation, message: "\\x must be followed by two hex digits")
                        }
                        code = code &* 16 &+ value
                        advance()
                    }
                    guard code <= 0x7F else {
                        throw PolicyDiagnostic(location: escapeLocation, message: "\\x escapes only ASCII characters (at most \\x7f): write \\u{…} for others")
                    }
                    decoded = Unicode.Scalar(code)
                case "\\", "\"", "'": decoded = escape
                case "*":
                    guard patternFollows else {
                        throw PolicyDiagnostic(location: escapeLocation, message: "\\* is an escape of 'like' patterns only: write * in other strings")
                    }
                    value.append("*")
                    pattern.append(.literal("*"))
                    continue
                case "u":
                    guard peek() == "{" else { throw PolicyDiagnostic(location: escapeLocation, message: "\\u must be followed by {hex digits}") }
                    advance()
                    var hex = ""
                    // Up to six hex digits; an underscore may follow a digit (`\u{1_F600}`), as in Cedar.
                    while let digit = peek(), digit.properties.isASCIIHexDigit || (digit == "_" && !hex.isEmpty), hex.count < 6 || digit == "_" {
                        if digit != "_" { hex.unicodeScalars.append(digit) }
                        advance()
                    }
                    guard peek() == "}", !hex.isEmpty, let code = UInt32(hex, radix: 16), let scalar = Unicode.Scalar(code) else {
                        throw PolicyDiagnostic(location: escapeLocation, message: "an invalid \\u{…} escape")
                    }
                    advance()
                    decoded = scalar
                default:
                    // The character shown escaped: a raw carriage return or a bidirectional control
                    // would otherwise rewrite the line the message is printed on.
                    throw PolicyDiagnostic(location: escapeLocation, message: "an unknown escape \\ followed by \(PolicyValue.quoted(String(escape), escapingNonASCII: true)) in a string")
                }
                value.append(decoded)
                // Only `\*` is a literal star in a pattern: a star written any other way
                // (`\u{2a}`, `\x2a`) is a wildcard, as in Cedar.
                pattern.append(decoded == "*" ? .wildcard : .literal(decoded))
                continue
            }
            value.append(scalar)
            pattern.append(scalar == "*" ? .wildcard : .literal(scalar))
        }
        return .string(String(value), pattern: pattern)
    }
}

extension Expression {
    /// Whether this is the principal's token: `context.token`, or `context["token"]`.
    var isContextToken: Bool {
        guard case .attribute(let context, let name) = kind, name == "token", case .variable(.context) = context.kind else { return false }
        return true
    }

    /// The field of the principal's token this expression reads (`context.token.granted`,
    /// `context["token"]["since"]`: `granted`, `since`), or `nil` for anything else, such as
    /// `context.tokens.granted`. Matched on the syntax tree, never on the expression's text.
    var tokenField: String? {
        guard case .attribute(let record, let field) = kind, record.isContextToken else { return nil }
        return field
    }

    /// Whether this is one of the token's four scope sets (`granted`, `declined`, `expired`, `revoked`).
    var isTokenScopeSet: Bool {
        guard let field = tokenField else { return false }
        return field == "granted" || field == "declined" || field == "expired" || field == "revoked"
    }

    /// Visits this expression, then every expression inside it (``operands(_:)``), each before
    /// what is inside it, in the order written: the one walk every question about a policy's
    /// text asks.
    func forEachExpression(_ visit: (Expression) -> Void) {
        visit(self)
        for operand in Self.operands(kind) { operand.forEachExpression(visit) }
    }

    /// The scope names this expression tests as literals when it is a test of one of the
    /// token's scope sets (`context.token.granted.contains("a")`, `.containsAll(["a", "b"])`,
    /// `.containsAny(…)`), in the order written; empty for any other expression.
    var testedScopeNames: [String] {
        guard case .method(let receiver, let name, let arguments) = kind,
              name == "contains" || name == "containsAll" || name == "containsAny", receiver.isTokenScopeSet else { return [] }
        var names: [String] = []
        for argument in arguments {
            switch argument.kind {
            case .literal(.string(let scope)): names.append(scope)
            case .set(let items):
                for item in items { if case .literal(.string(let scope)) = item.kind { names.append(scope) } }
            default: break
            }
        }
        return names
    }
}
