import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The exclusive lock that keeps a store directory to one open read-write store.
///
/// It is an `flock(2)` on `store.lock`. The lock belongs to the open file description, so a
/// second open in the same process conflicts just like one in another process, and the
/// operating system releases it when the holder exits or is killed. The holder's process
/// identifier is written into the file to make the "locked" error helpful; nothing else
/// depends on the file's contents.
///
/// Thread safety: ``release()`` may be called from any thread, any number of times.
package final class StoreLock: Sendable {
    /// The lock file's descriptor, `nil` once released; whether it holds the lock now (it
    /// does not while suspended).
    private let state: Locked<(descriptor: Int32?, isHeld: Bool)>
    private let fileSystem: FileSystem
    /// The lock file, for errors.
    private let url: URL

    /// Takes the lock on `path`, creating the file (mode 0600) when needed.
    ///
    /// - Throws: ``PersistenceError/Code/locked`` when anyone holds it,
    ///   ``PersistenceError/Code/directoryUnavailable`` when the file cannot be opened.
    package init(path: String, fileSystem: FileSystem) throws {
        let url = URL(fileURLWithPath: path)
        let descriptor: Int32
        do {
            descriptor = try fileSystem.open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
        } catch {
            throw PersistenceError(
                .directoryUnavailable,
                "Cannot open the store's lock file; check that the store directory is writable.",
                fileURL: url, underlyingError: error
            )
        }
        do {
            try fileSystem.setPermissions(descriptor, DurableFile.filePermissions)
            try fileSystem.lock(descriptor, LOCK_EX | LOCK_NB)
        } catch {
            let holder = Self.holderDescription(descriptor: descriptor, fileSystem: fileSystem)
            try? fileSystem.close(descriptor)
            if let error = error as? SystemCallError, error.code == EWOULDBLOCK {
                throw PersistenceError(
                    .locked,
                    "The store is already open\(holder). Only one process, and one store instance within it, may open a store for writing at a time; close the other instance, or open the store read-only to inspect it (ReadOnlyPersistentStore or store-inspector, which take no lock).",
                    fileURL: url, underlyingError: error
                )
            }
            throw PersistenceError(.directoryUnavailable, "Cannot lock the store.", fileURL: url, underlyingError: error)
        }
        Self.recordHolder(descriptor: descriptor, fileSystem: fileSystem)
        self.fileSystem = fileSystem
        self.url = url
        self.state = Locked((descriptor, true))
    }

    deinit {
        release()
    }

    /// Releases the lock; later calls do nothing.
    package func release() {
        guard let descriptor = state.withLock({ state -> Int32? in
            defer { state = (nil, false) }
            return state.descriptor
        }) else { return }
        // Unlock before closing: a child process forked by another thread in the instant
        // before its exec shares this open file description, and closing our descriptor alone
        // would leave the lock held until that child execs or exits.
        try? fileSystem.lock(descriptor, LOCK_UN)
        try? fileSystem.close(descriptor)
    }

    /// Lets the lock go, keeping the file open, until ``resume()``: the holder still owns the
    /// store by the app's own rule, but holds no file lock (iOS kills a suspended process that
    /// holds one in an App Group container). Does nothing when released or suspended.
    package func suspend() {
        state.withLock { state in
            guard let descriptor = state.descriptor, state.isHeld else { return }
            try? fileSystem.lock(descriptor, LOCK_UN)
            state.isHeld = false
        }
    }

    /// Takes the lock again after ``suspend()``. Does nothing when it is held or released.
    ///
    /// - Throws: ``PersistenceError/Code/locked`` when another process took it meanwhile.
    package func resume() throws {
        try state.withLock { state in
            guard let descriptor = state.descriptor, !state.isHeld else { return }
            do {
                try fileSystem.lock(descriptor, LOCK_EX | LOCK_NB)
            } catch {
                let holder = Self.holderDescription(descriptor: descriptor, fileSystem: fileSystem)
                throw PersistenceError(
                    .locked,
                    "Another process opened the store\(holder) while this one held no lock (the app was not active); this queue no longer changes the store. Close it, and open the store again once the other process has closed it.",
                    fileURL: url, underlyingError: error
                )
            }
            state.isHeld = true
            Self.recordHolder(descriptor: descriptor, fileSystem: fileSystem)
        }
    }

    /// Writes this process's identifier into the lock file, for the error other openers see.
    private static func recordHolder(descriptor: Int32, fileSystem: FileSystem) {
        let text = Data("\(getpid())\n".utf8)
        // From the start: after a suspension the offset is where the last write left it.
        _ = lseek(descriptor, 0, SEEK_SET)
        _ = ftruncate(descriptor, 0)
        _ = text.withUnsafeBytes { bytes in
            try? fileSystem.write(descriptor, bytes)
        }
    }

    /// " by process 123" when the lock file names the holder, otherwise "".
    private static func holderDescription(descriptor: Int32, fileSystem: FileSystem) -> String {
        var buffer = [UInt8](repeating: 0, count: 32)
        _ = lseek(descriptor, 0, SEEK_SET)
        let count = buffer.withUnsafeMutableBytes { bytes in
            (try? fileSystem.read(descriptor, bytes)) ?? 0
        }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let pid = Int32(text) else { return "" }
        return pid == getpid() ? " by another store instance in this process" : " by process \(pid)"
    }
}
