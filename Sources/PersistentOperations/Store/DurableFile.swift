import Foundation
import RetryingOperation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Whole-file writes that survive a crash or power loss, and size-capped reads that never
/// follow symbolic links or block on special files.
///
/// A write goes to a temporary file in the destination directory, is synced, and is renamed
/// over the destination, so a reader sees the old file or the new one, never a mix. Syncing the
/// directory afterwards, which makes the rename itself durable, is left to the caller so that
/// concurrent writers can share it (see ``DirectorySynchronizer``).
package struct DurableFile: Sendable {
    /// The permissions of every file the store creates.
    package static let filePermissions: mode_t = 0o600
    /// The suffix of temporary files; they start with a dot so listings can skip them.
    package static let temporaryFileSuffix = ".tmp"

    /// The file system the calls go through.
    package let fileSystem: FileSystem
    /// Shares file syncs among concurrent writers.
    private let contents: ContentSynchronizer

    /// Creates a writer and reader that makes its calls through `fileSystem`.
    package init(fileSystem: FileSystem) {
        self.fileSystem = fileSystem
        self.contents = ContentSynchronizer(fileSystem: fileSystem)
    }

    /// Writes `bytes` to a temporary file next to `path`, syncs it (unless `synchronizes` is
    /// `false`, for files that only need to survive a process crash) and renames it to `path`.
    /// Concurrent writes through the same `DurableFile` share their syncs where the file
    /// system allows (see ``ContentSynchronizer``).
    ///
    /// On failure no temporary or partial file is left behind and an existing file at `path`
    /// is unchanged.
    ///
    /// - Throws: ``SystemCallError`` naming the call that failed.
    package func replaceContents(of path: String, with bytes: Data, synchronizes: Bool = true) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let (temporaryPath, descriptor) = try createTemporaryFile(in: directory, for: name)
        var isOpen = true
        do {
            try fileSystem.setPermissions(descriptor, Self.filePermissions)
            try writeAll(bytes, to: descriptor)
            if synchronizes { try contents.synchronize(descriptor) }
            isOpen = false
            try fileSystem.close(descriptor)
            try fileSystem.rename(temporaryPath, path)
        } catch {
            if isOpen { try? fileSystem.close(descriptor) }
            // Best effort: the temporary file may not exist, and load removes stale ones anyway.
            try? fileSystem.unlink(temporaryPath)
            throw error
        }
    }

    /// Writes several files like ``replaceContents(of:with:synchronizes:)``, sharing one
    /// file-system sync among them: every temporary file is written, then (where the file
    /// system offers it) one `syncfs(2)` flushes them all before each file's own, now cheap,
    /// sync reports its errors, then each is renamed into place in order.
    ///
    /// On failure the files already renamed are named in the error's `renamed` list, so the
    /// caller can take them back; no temporary file is left behind.
    ///
    /// - Throws: ``BatchWriteError`` wrapping the ``SystemCallError`` that failed.
    package func replaceContents(ofAll files: [(path: String, bytes: Data)]) throws {
        var temporaries: [(path: String, descriptor: Int32?)] = []
        var renamed: [String] = []
        do {
            for file in files {
                let directory = (file.path as NSString).deletingLastPathComponent
                let name = (file.path as NSString).lastPathComponent
                let (temporaryPath, descriptor) = try createTemporaryFile(in: directory, for: name)
                temporaries.append((temporaryPath, descriptor))
                try fileSystem.setPermissions(descriptor, Self.filePermissions)
                try writeAll(file.bytes, to: descriptor)
            }
            if files.count > 1, let synchronizeFileSystem = fileSystem.synchronizeFileSystem, let first = temporaries.first?.descriptor {
                // Not reported: each file's own sync below is the one that counts.
                try? synchronizeFileSystem(first)
            }
            for index in temporaries.indices {
                guard let descriptor = temporaries[index].descriptor else { continue }
                try fileSystem.synchronize(descriptor)
                temporaries[index].descriptor = nil
                try fileSystem.close(descriptor)
            }
            for (index, file) in files.enumerated() {
                try fileSystem.rename(temporaries[index].path, file.path)
                renamed.append(file.path)
            }
        } catch {
            for temporary in temporaries {
                if let descriptor = temporary.descriptor { try? fileSystem.close(descriptor) }
            }
            for temporary in temporaries.dropFirst(renamed.count) {
                try? fileSystem.unlink(temporary.path)
            }
            throw BatchWriteError(renamed: renamed, underlyingError: error)
        }
    }

    /// The failure of ``replaceContents(ofAll:)``.
    package struct BatchWriteError: Error {
        /// The destination paths that were renamed into place before the failure.
        package var renamed: [String]
        /// What failed.
        package var underlyingError: any Error
    }

    /// The outcome of ``read(_:maximumSize:)``.
    package enum ReadResult: Sendable, Equatable {
        /// The whole file.
        case contents(Data)
        /// The entry is not a regular file (a directory, symbolic link, FIFO, device or socket).
        case notRegularFile(FileStatus.Kind)
        /// The file is bigger than the cap; it was not read.
        case tooLarge(size: Int64)
    }

    /// Reads a regular file of at most `maximumSize` bytes without following a symbolic link.
    ///
    /// - Throws: ``SystemCallError`` when the file cannot be opened or read.
    package func read(_ path: String, maximumSize: Int) throws -> ReadResult {
        let descriptor: Int32
        do {
            // O_NONBLOCK: opening a FIFO must not wait for a writer.
            descriptor = try fileSystem.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0)
        } catch let error as SystemCallError where error.code == ELOOP {
            return .notRegularFile(.symbolicLink)
        }
        defer { try? fileSystem.close(descriptor) }
        let status = try fileSystem.status(descriptor)
        guard status.kind == .regular else { return .notRegularFile(status.kind) }
        guard status.size <= Int64(maximumSize) else { return .tooLarge(size: status.size) }
        var bytes = Data(count: Int(status.size))
        var filled = 0
        try bytes.withUnsafeMutableBytes { buffer in
            while filled < buffer.count {
                let count = try fileSystem.read(descriptor, UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
                if count == 0 { break }
                filled += count
            }
        }
        if filled < bytes.count {
            // The file shrank while being read; return what is there, verification rejects it.
            bytes.removeSubrange(filled...)
        } else {
            // The file may have grown: one more byte past the size means it is too large or changing.
            var extra: UInt8 = 0
            let more = try withUnsafeMutableBytes(of: &extra) { try fileSystem.read(descriptor, $0) }
            if more > 0 { return .tooLarge(size: status.size + Int64(more)) }
        }
        return .contents(bytes)
    }

    /// Creates a new temporary file `.<name>.<process id>-<counter>.tmp` in `directory`.
    ///
    /// The names are unique within the process without reading `/dev/urandom` (which `UUID()`
    /// does on Linux, one `open` per call); a name left by an earlier process is skipped.
    private func createTemporaryFile(in directory: String, for name: String) throws -> (path: String, descriptor: Int32) {
        while true {
            let number = Self.temporaryFileCounter.withLock { counter -> UInt64 in
                counter &+= 1
                return counter
            }
            let path = directory + "/." + name + "." + Self.processIdentifier + "-" + String(number) + Self.temporaryFileSuffix
            do {
                let descriptor = try fileSystem.open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, Self.filePermissions)
                return (path, descriptor)
            } catch let error as SystemCallError where error.code == EEXIST {
                continue
            }
        }
    }

    private static let temporaryFileCounter = Locked<UInt64>(0)
    private static let processIdentifier = String(getpid())

    private func writeAll(_ bytes: Data, to descriptor: Int32) throws {
        try bytes.withUnsafeBytes { buffer in
            var written = 0
            while written < buffer.count {
                let count = try fileSystem.write(descriptor, UnsafeRawBufferPointer(rebasing: buffer[written...]))
                guard count > 0 else { throw SystemCallError("write", code: EIO) }
                written += count
            }
        }
    }
}
