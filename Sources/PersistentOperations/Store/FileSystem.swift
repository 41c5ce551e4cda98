import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The file-system calls the store makes, as replaceable closures.
///
/// ``system`` calls the operating system. Tests start from it and replace single calls to
/// inject faults (`ENOSPC` on write, `EIO` on fsync, a read-only file system) or to count
/// directory syncs. Every closure throws ``SystemCallError`` on failure and retries `EINTR`
/// itself.
package struct FileSystem: Sendable {
    /// `open(2)`; returns the descriptor.
    package var open: @Sendable (_ path: String, _ flags: Int32, _ mode: mode_t) throws -> Int32
    /// `close(2)`.
    package var close: @Sendable (_ descriptor: Int32) throws -> Void
    /// `read(2)`; returns the number of bytes read, 0 at the end of the file.
    package var read: @Sendable (_ descriptor: Int32, _ buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// `pread(2)`: reads at `offset`, whatever the descriptor's file offset; returns the number
    /// of bytes read, which may be fewer than asked, 0 at the end of the file.
    package var readAt: @Sendable (_ descriptor: Int32, _ buffer: UnsafeMutableRawBufferPointer, _ offset: Int64) throws -> Int
    /// `write(2)`; returns the number of bytes written, which may be fewer than asked.
    package var write: @Sendable (_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) throws -> Int
    /// `pwrite(2)`: writes at `offset`, whatever the descriptor's file offset; returns the number
    /// of bytes written, which may be fewer than asked.
    package var writeAt: @Sendable (_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, _ offset: Int64) throws -> Int
    /// `ftruncate(2)`: cuts (or extends with zeros) the file to `length` bytes.
    package var truncate: @Sendable (_ descriptor: Int32, _ length: Int64) throws -> Void
    /// Flushes a file's contents to stable storage (`fsync(2)`; `F_FULLFSYNC` on Apple platforms).
    package var synchronize: @Sendable (_ descriptor: Int32) throws -> Void
    /// Flushes a file's data, and only the metadata needed to read it back (its size), to
    /// stable storage: `fdatasync(2)`; `F_FULLFSYNC` on Apple platforms, where `fsync` does not
    /// reach the drive.
    package var synchronizeData: @Sendable (_ descriptor: Int32) throws -> Void
    /// Flushes every file of the file system holding `descriptor` (`syncfs(2)`), so that the
    /// ``synchronize`` calls of files written before it find little left to do; `nil` where
    /// there is no such call. Only ever an accelerator: see ``ContentSynchronizer``.
    package var synchronizeFileSystem: (@Sendable (_ descriptor: Int32) throws -> Void)?
    /// Flushes a directory's entries (renames, creations, removals) to stable storage.
    package var synchronizeDirectory: @Sendable (_ path: String) throws -> Void
    /// `fchmod(2)`.
    package var setPermissions: @Sendable (_ descriptor: Int32, _ mode: mode_t) throws -> Void
    /// `chmod(2)`, used for directories.
    package var setPathPermissions: @Sendable (_ path: String, _ mode: mode_t) throws -> Void
    /// `fstat(2)`.
    package var status: @Sendable (_ descriptor: Int32) throws -> FileStatus
    /// `lstat(2)`: describes a symbolic link itself rather than its target.
    package var linkStatus: @Sendable (_ path: String) throws -> FileStatus
    /// `rename(2)`.
    package var rename: @Sendable (_ source: String, _ destination: String) throws -> Void
    /// `link(2)`: a second name for an existing file.
    package var link: @Sendable (_ existing: String, _ newName: String) throws -> Void
    /// `unlink(2)`.
    package var unlink: @Sendable (_ path: String) throws -> Void
    /// `mkdir(2)`.
    package var makeDirectory: @Sendable (_ path: String, _ mode: mode_t) throws -> Void
    /// The names in a directory, without `.` and `..`.
    package var contentsOfDirectory: @Sendable (_ path: String) throws -> [String]
    /// `flock(2)`.
    package var lock: @Sendable (_ descriptor: Int32, _ operation: Int32) throws -> Void
}

/// What ``FileSystem/status`` and ``FileSystem/linkStatus`` report about a file.
package struct FileStatus: Sendable, Equatable {
    /// The kind of a directory entry.
    package enum Kind: Sendable, Equatable {
        case regular, directory, symbolicLink, other
    }

    /// The kind of entry.
    package var kind: Kind
    /// The size in bytes.
    package var size: Int64
    /// The permission bits (`0o777` mask).
    package var permissions: mode_t
}

/// A failed system call: which call, on which path, and the `errno` it set.
package struct SystemCallError: Error, CustomStringConvertible, Sendable {
    /// The name of the call, such as `"fsync"`.
    package var call: String
    /// The path involved, when there is one.
    package var path: String?
    /// The `errno` value.
    package var code: Int32

    package init(_ call: String, path: String? = nil, code: Int32) {
        self.call = call
        self.path = path
        self.code = code
    }

    package var description: String {
        let reason = String(cString: strerror(code))
        return "\(call)\(path.map { " \($0)" } ?? "") failed: \(reason) (errno \(code))"
    }
}

extension FileSystem {
    /// The operating system's file system.
    package static let system = FileSystem(
        open: { path, flags, mode in
            try retryingInterrupts("open", path: path) { Foundation.open(path, flags, mode) }
        },
        close: { descriptor in
            // Never retry close: the descriptor is released even when it reports EINTR.
            if Foundation.close(descriptor) != 0, errno != EINTR {
                throw SystemCallError("close", code: errno)
            }
        },
        read: { descriptor, buffer in
            try retryingInterrupts("read") { Foundation.read(descriptor, buffer.baseAddress, buffer.count) }
        },
        readAt: { descriptor, buffer, offset in
            try retryingInterrupts("pread") { Foundation.pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset)) }
        },
        write: { descriptor, bytes in
            try retryingInterrupts("write") { Foundation.write(descriptor, bytes.baseAddress, bytes.count) }
        },
        writeAt: { descriptor, bytes, offset in
            try retryingInterrupts("pwrite") { Foundation.pwrite(descriptor, bytes.baseAddress, bytes.count, off_t(offset)) }
        },
        truncate: { descriptor, length in
            try retryingInterrupts("ftruncate") { Foundation.ftruncate(descriptor, off_t(length)) }
        },
        synchronize: { descriptor in
            try fullSynchronize(descriptor)
        },
        synchronizeData: { descriptor in
            #if canImport(Darwin)
            try fullSynchronize(descriptor)
            #else
            try retryingInterrupts("fdatasync") { Foundation.fdatasync(descriptor) }
            #endif
        },
        synchronizeFileSystem: systemSynchronizeFileSystem,
        synchronizeDirectory: { path in
            let descriptor = try retryingInterrupts("open", path: path) {
                Foundation.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            }
            defer { _ = Foundation.close(descriptor) }
            try retryingInterrupts("fsync", path: path) { Foundation.fsync(descriptor) }
        },
        setPermissions: { descriptor, mode in
            try retryingInterrupts("fchmod") { Foundation.fchmod(descriptor, mode) }
        },
        setPathPermissions: { path, mode in
            try retryingInterrupts("chmod", path: path) { Foundation.chmod(path, mode) }
        },
        status: { descriptor in
            var info = stat()
            try retryingInterrupts("fstat") { Foundation.fstat(descriptor, &info) }
            return FileStatus(info)
        },
        linkStatus: { path in
            var info = stat()
            try retryingInterrupts("lstat", path: path) { Foundation.lstat(path, &info) }
            return FileStatus(info)
        },
        rename: { source, destination in
            try retryingInterrupts("rename", path: source) { Foundation.rename(source, destination) }
        },
        link: { existing, newName in
            try retryingInterrupts("link", path: newName) { Foundation.link(existing, newName) }
        },
        unlink: { path in
            try retryingInterrupts("unlink", path: path) { Foundation.unlink(path) }
        },
        makeDirectory: { path, mode in
            try retryingInterrupts("mkdir", path: path) { Foundation.mkdir(path, mode) }
        },
        contentsOfDirectory: { path in
            guard let directory = opendir(path) else { throw SystemCallError("opendir", path: path, code: errno) }
            defer { closedir(directory) }
            var names: [String] = []
            while true {
                errno = 0
                guard let entry = readdir(directory) else {
                    if errno != 0 { throw SystemCallError("readdir", path: path, code: errno) }
                    return names
                }
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
                }
                if name != ".", name != ".." { names.append(name) }
            }
        },
        lock: { descriptor, operation in
            try retryingInterrupts("flock") { systemFlock(descriptor, operation) }
        }
    )
}

extension FileSystem {
    /// Writes all of `bytes` to `descriptor` from `offset` on, with as many `pwrite`s as it
    /// takes (a short write is continued; one that writes nothing fails with `EIO`, naming
    /// `path`).
    package func writeWhole<Bytes: ContiguousBytes>(_ descriptor: Int32, _ bytes: Bytes, at offset: Int64, path: String) throws {
        try bytes.withUnsafeBytes { raw in
            var done = 0
            while done < raw.count {
                let count = try writeAt(descriptor, UnsafeRawBufferPointer(rebasing: raw[done...]), offset + Int64(done))
                guard count > 0 else { throw SystemCallError("pwrite", path: path, code: EIO) }
                done += count
            }
        }
    }
}

extension FileStatus {
    init(_ info: stat) {
        let type = info.st_mode & S_IFMT
        switch type {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        default: kind = .other
        }
        size = Int64(info.st_size)
        permissions = info.st_mode & 0o777
    }
}

/// Runs a call that returns -1 and sets `errno` on failure, retrying `EINTR`.
@discardableResult
private func retryingInterrupts<Result: BinaryInteger>(
    _ call: String, path: String? = nil, _ body: () -> Result
) throws -> Result {
    while true {
        let result = body()
        if result != -1 { return result }
        if errno != EINTR { throw SystemCallError(call, path: path, code: errno) }
    }
}

private func systemFlock(_ descriptor: Int32, _ operation: Int32) -> Int32 {
    // Unqualified: the module-qualified name resolves to the `struct flock` type.
    let function: @convention(c) (Int32, Int32) -> Int32 = flock
    return function(descriptor, operation)
}

/// `syncfs(2)`, looked up at run time: Glibc's module map does not export it.
private let systemSynchronizeFileSystem: (@Sendable (Int32) throws -> Void)? = {
    #if os(Linux)
    typealias SyncFileSystem = @convention(c) (Int32) -> Int32
    // RTLD_DEFAULT is a null handle on glibc.
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs") else { return nil }
    let function = unsafeBitCast(symbol, to: SyncFileSystem.self)
    return { descriptor in
        try retryingInterrupts("syncfs") { function(descriptor) }
    }
    #else
    return nil
    #endif
}()

private func fullSynchronize(_ descriptor: Int32) throws {
    #if canImport(Darwin)
    // On Apple platforms fsync does not flush the drive's cache; F_FULLFSYNC does. Some file
    // systems do not support it, and fsync is the best they offer.
    if fcntl(descriptor, F_FULLFSYNC) != -1 { return }
    #endif
    try retryingInterrupts("fsync") { Foundation.fsync(descriptor) }
}
