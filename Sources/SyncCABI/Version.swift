// The library's version, for sync_version() (keep in step with SYNC_VERSION_* in sync.h).
private let version: StaticString = "0.1.0"

@_cdecl("sync_version") public func c_sync_version() -> UnsafePointer<CChar> {
    UnsafeRawPointer(version.utf8Start).assumingMemoryBound(to: CChar.self)
}
