import Foundation
import KeysmithTokens

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = try? OAuthToken(response: Data(bytes), requested: [], now: Date(timeIntervalSince1970: 0))
    if var token = try? OAuthToken(response: Data(#"{"access_token":"a","token_type":"Bearer","scope":"a b"}"#.utf8), requested: [], now: Date(timeIntervalSince1970: 0)) {
        try? token.applyRefresh(response: Data(bytes), at: Date(timeIntervalSince1970: 1))
        _ = try? OAuthToken(storedSecret: Data(bytes))
    }
    _ = try? Scope.parseList(String(decoding: bytes, as: UTF8.self))
    return 0
}

// SwiftPM links an executable's entry point as `<Target>_main`; hand control to libFuzzer's
// driver from there.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32
) -> Int32

@_cdecl("FuzzTokenResponse_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments, fuzz)
}
