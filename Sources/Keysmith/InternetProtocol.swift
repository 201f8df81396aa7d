/// The protocol of an internet password, as in a keychain's internet password item.
///
/// The raw value is the lower-case name stored with the item (and shown to the Secret Service's
/// tools as the `protocol` attribute), such as `https` or `ssh`.
public enum InternetProtocol: String, Sendable, Hashable, Codable, CaseIterable {
    /// The protocols of a keychain's internet password (Locksmith's list), by their usual names.
    case afp, appleTalk = "appletalk", daap, eppc, ftp, ftpAccount = "ftp-account", ftpProxy = "ftp-proxy", ftps
    case http, httpProxy = "http-proxy", https, httpsProxy = "https-proxy", imap, imaps, ipp, irc, ircs
    case ldap, ldaps, nntp, nntps, pop3, pop3s, rtsp, rtspProxy = "rtsp-proxy", smb, smtp, socks, ssh
    case telnet, telnets
}

/// How an internet password authenticates, as in a keychain's internet password item.
///
/// The raw value is the name stored with the item, such as `http-basic`.
public enum InternetAuthenticationType: String, Sendable, Hashable, Codable, CaseIterable {
    /// The protocol's default authentication.
    case `default`
    /// NTLM, MSN, DPA and RPA challenge-response schemes.
    case ntlm, msn, dpa, rpa
    /// HTTP Basic, HTTP Digest and an HTML form.
    case httpBasic = "http-basic", httpDigest = "http-digest", htmlForm = "html-form"
}
