import Foundation
import FuzzDriver
@_spi(Fuzzing) import KeysmithVault

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    VaultFormatFuzzing.parse(bytes)
    return 0
}

@_cdecl("FuzzVaultFormat_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzz)
}
