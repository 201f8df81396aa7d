import Synchronization

/// Interns role, action and scope names as small integers, so that engines index policies by
/// integer rather than by hashing strings on every decision. It holds names only, never rules.
enum NameTable {
    private static let table = Mutex<(ids: [String: Int], names: [String])>(([:], []))

    static func id(for name: String) -> Int {
        table.withLock { table in
            if let id = table.ids[name] { return id }
            let id = table.names.count
            table.ids[name] = id
            table.names.append(name)
            return id
        }
    }
}

/// A role a principal holds, globally or on one resource: `member`, `admin`, `super-admin`.
///
/// Roles form a hierarchy declared in the engine (`admin` inherits `member`): holding a role
/// grants what every role it inherits grants.
public struct Role: Hashable, Sendable, CustomStringConvertible {
    /// The role's name.
    public let name: String
    let id: Int

    /// A role by name.
    public init(_ name: String) {
        self.name = name
        self.id = NameTable.id(for: name)
    }

    /// Everyone, signed in or not: every principal holds it.
    public static let anyone = Role("anyone")
    /// Every signed-in (non-anonymous) principal holds it.
    public static let authenticated = Role("authenticated")

    /// The role's name.
    public var description: String { name }
    /// Roles are equal when their names are.
    public static func == (lhs: Role, rhs: Role) -> Bool { lhs.id == rhs.id }
    /// Hashes the interned name.
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
}

/// Something a principal may do to a resource: `browse`, `post`, `delete`.
public struct Action: Hashable, Sendable, CustomStringConvertible {
    /// The action's name.
    public let name: String
    let id: Int

    /// An action by name.
    public init(_ name: String) {
        self.name = name
        self.id = NameTable.id(for: "action:" + name)
    }

    /// The action's name.
    public var description: String { name }
    /// Actions are equal when their names are.
    public static func == (lhs: Action, rhs: Action) -> Bool { lhs.id == rhs.id }
    /// Hashes the interned name.
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
}
