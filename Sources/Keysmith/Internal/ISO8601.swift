package import FoundationEssentials

/// A time as ISO 8601 text in UTC (`2026-11-28T02:56:36Z`): the one spelling of every time
/// Keysmith writes (vault headers, the command's output, token summaries, policy decisions).
package func iso8601(_ date: Date) -> String {
    date.formatted(Date.ISO8601FormatStyle())
}
