import Foundation
import FuzzDriver
import KeysmithPolicy

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let engine = try? PolicyFile.engine(from: bytes) {
        _ = engine.allPolicies.count
    }
    _ = try? PolicyRequestJSON.request(from: bytes)
    _ = try? PolicyTestFile(bytes: bytes)
    return 0
}

@_cdecl("FuzzPolicyFile_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzz)
}
