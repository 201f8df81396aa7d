extension Keysmith {
    /// Which Keysmith this is, in semantic versioning (while it is 0.x, a minor release may
    /// break; CHANGELOG.md says how to migrate). The one place the version is written:
    /// `keysmith --version` prints it, and a test holds it equal to CHANGELOG.md's newest release.
    ///
    /// ```swift
    /// print("Keysmith \(Keysmith.version)")   // Keysmith 0.5.0
    /// ```
    public static let version = "0.5.0"
}
