// Shared by every fuzz target: SwiftPM links an executable's entry point as `<Target>_main`,
// and each target's `<Target>_main` hands control to libFuzzer's driver through this.

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32
) -> Int32

/// Runs libFuzzer with the process's arguments and a target's test function.
public func runFuzzer(
    _ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32
) -> Int32 {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments, callback)
}
