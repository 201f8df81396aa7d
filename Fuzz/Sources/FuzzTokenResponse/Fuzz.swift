import Foundation
import FuzzDriver
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

@_cdecl("FuzzTokenResponse_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzz)
}
