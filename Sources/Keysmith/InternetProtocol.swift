/// The protocol of an internet password, as in a keychain's internet password item.
///
/// The raw value is the lower-case name stored with the item (and shown to the Secret Service's
/// tools as the `protocol` attribute), such as `https` or `ssh`.
public enum InternetProtocol: String, Sendable, Hashable, Codable, CaseIterable {
    /// File sharing, Apple and web-calendar protocols and FTP (Locksmith's list, by their usual names).
    case afp, appleTalk = "appletalk", daap, eppc, ftp, ftpAccount = "ftp-account", ftpProxy = "ftp-proxy", ftps
    /// The web, mail and chat: HTTP and its proxies, IMAP, IPP, IRC.
    case http, httpProxy = "http-proxy", https, httpsProxy = "https-proxy", imap, imaps, ipp, irc, ircs
    /// Directories, news, mail, streaming, Windows sharing, proxies and SSH.
    case ldap, ldaps, nntp, nntps, pop3, pop3s, rtsp, rtspProxy = "rtsp-proxy", smb, smtp, socks, ssh
    /// Telnet, plain and over TLS.
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
