/// Which Keysmith this is. The one place the version is written: `keysmith --version` prints it,
/// CHANGELOG.md's newest release names it, and a test holds the two together.
///
/// ```swift
/// print("Keysmith \(KeysmithVersion.current)")   // Keysmith 0.4.0
/// ```
public enum KeysmithVersion {
    /// The release, in semantic versioning (while it is 0.x, a minor bump may break; CHANGELOG.md
    /// says how to migrate).
    public static let current = "0.4.0"
}
