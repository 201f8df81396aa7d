// Keysmith's core uses FoundationEssentials where the toolchain has it: it gives Data, Date and
// JSON coding without loading all of Foundation, which keeps the `keysmith` command's start fast.
#if canImport(FoundationEssentials)
@_exported public import FoundationEssentials
#else
@_exported public import Foundation
#endif
