// Which lock a target names, whatever its spelling: the key under which a process records the
// holds of its threads (`HoldRegistry`), so that a thread waiting with no timeout for a lock it
// holds through another object gets EDEADLK instead of waiting for itself forever.

enum LockIdentity {
    /// The identity of the lock `target` names (`LockBackend.name`: an absolute path, or a URL
    /// without its password). A path is its own identity. A URL's is (engine, host, port,
    /// database, lock name): the scheme's aliases are one engine; the host is lowercased, and
    /// every spelling of the loopback address (localhost, 127.x.y.z, ::1) is one host; a missing
    /// port or database is the engine's default (PostgreSQL: 5432 and the user's name; Redis:
    /// 6379 and 0; etcd: 2379); parameters that do not change the lock (timeouts, ttl, libpq options) are
    /// left out. Two spellings of one lock have one identity; two identities are two locks,
    /// unless their names reach one server by different routes (a host by name and by
    /// address), which this does not resolve.
    static func of(_ target: String) -> String {
        guard target.contains("://") else { return target }
        let (parsed, _) = LockURL.parse(target)
        guard let url = parsed, let name = url.value("lock") else { return target }
        switch url.scheme {
        case "postgresql", "postgres":
            // libpq takes host, port, dbname and user from the query too, over the URL's.
            let host = url.value("host") ?? url.host
            let port = url.value("port").flatMap { Int($0) } ?? url.port ?? 5432
            let user = url.value("user") ?? url.user ?? ""
            let database = url.value("dbname") ?? (url.path.isEmpty ? user : url.path)
            return "postgresql \(hostKey(host)) \(port) \(database.utf8.count):\(database) \(name)"
        case "redis":
            let database = url.path.isEmpty ? "0" : url.path
            return "redis \(hostKey(url.host)) \(url.port ?? 6379) \(database) \(name)"
        case "etcd":
            return "etcd \(hostKey(url.host)) \(url.port ?? 2379) \(name)"
        default:
            return target
        }
    }

    /// `host` lowercased, with the loopback address's spellings as one.
    private static func hostKey(_ host: String) -> String {
        let host = host.lowercased()
        if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" || host.hasPrefix("127.") { return "loopback" }
        return host
    }
}
