// The etcd backend's shared/exclusive (read/write) lock: etcd's own recipe (its client's
// `recipes.RWMutex`), on the exclusive lock's session (EtcdBackend.swift) with a side. The lock
// NAME owns the range PREFIX = `libsync/rwlock/NAME/` (apart from the exclusive lock's); each
// attempt puts a key of its own, on the process's lease, under PREFIX + `r/` (a reader) or
// PREFIX + `w/` (a writer). Keys are ordered by create revision:
//
//   reader   holds when no writer key was created before its own: try = TXN if no key of
//            PREFIX/w/ exists then PUT mine; wait = PUT mine, then WATCH the last writer key
//            created before it (no polling) until it is deleted, and look again
//   writer   holds when no key of either kind was created before its own (the exclusive
//            lock's rule over the whole range): try = TXN if PREFIX is empty then PUT mine;
//            wait = PUT mine, then WATCH the last key of any kind created before it
//   release  delete my key; a key whose lease ended is gone (the hold's loss, reported by the
//            lease keeper as the exclusive lock's)
//
// Writer preference: a waiting writer's key is in PREFIX/w/, so every reader that comes after
// it waits for it; the readers before it keep their share and it waits for them. The fencing
// token is the key's create revision: a writer's is larger than every reader's before it (they
// were created earlier), a reader's larger than every writer's before it (it waited for them).
// A dead holder's key goes with its lease (ttl + ttl/3 at most); on this host a waiter deletes
// a dead predecessor's key at once.

/// Which lock an etcd session takes.
enum EtcdLockSide: Sendable {
    case exclusive, read, write

    /// The part of its keys' names after the lock's prefix.
    var keyPrefix: String {
        switch self {
        case .exclusive: return ""
        case .read: return "r/"
        case .write: return "w/"
        }
    }
}

extension EtcdBackend {
    /// The writers' keys of a read/write lock: [writersPrefix, writersEnd).
    var writersPrefix: String { prefix + EtcdLockSide.write.keyPrefix }
    var writersEnd: String { prefix + "w0" }

    /// Both sides of the read/write lock the etcd URL `url` names (the exclusive lock's grammar).
    static func makeReadWrite(url: String) -> ((read: any LockBackend, write: any LockBackend)?, Int32) {
        let (made, code) = make(url: url)
        guard let plain = made as? EtcdBackend else { return (nil, code) }
        let escaped = String(plain.prefix.dropFirst("libsync/lock/".count).dropLast())
        let prefix = "libsync/rwlock/" + escaped + "/", end = "libsync/rwlock/" + escaped + "0"
        func side(_ side: EtcdLockSide) -> EtcdBackend {
            EtcdBackend(name: plain.name, address: plain.address, prefix: prefix, rangeEnd: end, ttlNanoseconds: plain.ttlNanoseconds,
                        side: side)
        }
        return ((side(.read), side(.write)), 0)
    }
}
