import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The areas of a store directory and the paths inside it.
///
/// ```
/// <directory>/store.lock        flock target, holds the holder's process id
/// <directory>/pending/<id>.record
/// <directory>/failed/<id>.record
/// <directory>/quarantine/<name> entries that failed verification, as they were found
/// <directory>/attempts/<id>.attempt, <id>.suspect, launch   crash-loop evidence (see `RecordStore+CrashEvidence`)
/// <directory>/batches/<batch id>.batch  commit markers of `addOperations` batches
/// ```
package struct StoreLayout: Sendable {
    /// A subdirectory of the store.
    package enum Area: String, Sendable, CaseIterable {
        /// Records waiting to run or to be retried.
        case pending
        /// Records that failed for good (the dead-letter area).
        case failed
        /// Entries that could not be read, kept for inspection.
        case quarantine
        /// Markers of attempts in flight, for crash-loop protection (not synced: they only
        /// need to survive a process crash).
        case attempts
        /// Commit markers of batches stored by `addOperations`: a record carrying a batch
        /// identifier counts only while its batch's marker exists.
        case batches
    }

    /// The permissions of every directory the store creates.
    package static let directoryPermissions: mode_t = 0o700
    /// The extension of record files.
    package static let recordExtension = "record"
    /// The extension of batch commit markers.
    package static let batchMarkerExtension = "batch"
    /// The suffix of the text file beside a quarantined entry that says why it is there.
    package static let reasonSuffix = ".reason"

    /// The store directory.
    package let root: String

    /// Creates the layout of the store at `directory`. A `directory` that is a symbolic link
    /// to a directory stands for the directory it names (resolved once, here); a link to
    /// anything else is left as it is, for ``createDirectories(fileSystem:)`` to refuse.
    package init(directory: URL) {
        var root = directory.standardizedFileURL.path
        while root.count > 1, root.hasSuffix("/") { root.removeLast() }
        self.root = Self.resolvingLinkToDirectory(root)
    }

    /// `path` with its symbolic links resolved when it is a symbolic link to a directory;
    /// otherwise `path`.
    private static func resolvingLinkToDirectory(_ path: String) -> String {
        var link = stat()
        var isDirectory: ObjCBool = false
        guard Foundation.lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK,
              FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue,
              let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The path of `area`.
    package func path(of area: Area) -> String {
        root + "/" + area.rawValue
    }

    /// The path of the record with identifier `id` in `area`.
    package func path(ofRecord id: String, in area: Area) -> String {
        path(of: area) + "/" + Self.fileName(ofRecord: id)
    }

    /// The path of the entry called `name` in `area`.
    package func path(ofEntry name: String, in area: Area) -> String {
        path(of: area) + "/" + name
    }

    /// The path of the commit marker of batch `batchID`.
    package func path(ofBatchMarker batchID: String) -> String {
        path(of: .batches) + "/" + batchID + "." + Self.batchMarkerExtension
    }

    /// The batch identifier a file name stands for, when it is `<UUID>.batch`.
    package static func batchIdentifier(fromFileName name: String) -> String? {
        let suffix = "." + batchMarkerExtension
        guard name.hasSuffix(suffix) else { return nil }
        let id = String(name.dropLast(suffix.count))
        return OperationRecord.isValidIdentifier(id) ? id : nil
    }

    /// The path of the lock file.
    package var lockPath: String { root + "/store.lock" }

    /// The file name of the record with identifier `id`.
    package static func fileName(ofRecord id: String) -> String {
        id + "." + recordExtension
    }

    /// The record identifier a file name stands for, when it is `<UUID>.record`.
    package static func recordIdentifier(fromFileName name: String) -> String? {
        let suffix = "." + recordExtension
        guard name.hasSuffix(suffix) else { return nil }
        let id = String(name.dropLast(suffix.count))
        return OperationRecord.isValidIdentifier(id) ? id : nil
    }

    /// Whether `name` is a temporary file left by an interrupted write.
    package static func isTemporaryFileName(_ name: String) -> Bool {
        name.hasPrefix(".") && name.hasSuffix(DurableFile.temporaryFileSuffix)
    }

    /// Creates the store directory (and missing parents) and its areas with mode 0700, and
    /// makes existing ones 0700; syncs each parent whose entries changed.
    ///
    /// - Throws: ``PersistenceError/Code/directoryUnavailable``.
    package func createDirectories(fileSystem: FileSystem, areas: [Area] = Area.allCases) throws {
        try createDirectory(root, fileSystem: fileSystem)
        for area in areas {
            try createDirectory(path(of: area), fileSystem: fileSystem)
        }
    }

    private func createDirectory(_ path: String, fileSystem: FileSystem) throws {
        let url = URL(fileURLWithPath: path)
        do {
            if let status = try? fileSystem.linkStatus(path) {
                if status.kind == .symbolicLink {
                    // A link to a directory was resolved by `init`: this one is dangling or
                    // names something else.
                    let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?"
                    let isDangling = !FileManager.default.fileExists(atPath: path)
                    throw PersistenceError(
                        .directoryUnavailable,
                        isDangling
                            ? "A store directory path is a symbolic link to \(target), which does not exist; create that directory, or remove the link."
                            : "A store directory path is a symbolic link to \(target), which is not a directory; point the link at a directory, or choose another store directory.",
                        fileURL: url
                    )
                }
                guard status.kind == .directory else {
                    throw PersistenceError(
                        .directoryUnavailable,
                        "A store directory path exists but is not a directory; move it away or choose another store directory.",
                        fileURL: url
                    )
                }
            } else {
                let parent = (path as NSString).deletingLastPathComponent
                if parent != path, (try? fileSystem.linkStatus(parent)) == nil {
                    try createDirectory(parent, fileSystem: fileSystem)
                }
                do {
                    try fileSystem.makeDirectory(path, Self.directoryPermissions)
                } catch let error as SystemCallError where error.code == EEXIST {
                    // Created concurrently; the checks below still apply.
                }
                try fileSystem.synchronizeDirectory(parent)
            }
            if try fileSystem.linkStatus(path).permissions != Self.directoryPermissions {
                try fileSystem.setPathPermissions(path, Self.directoryPermissions)
            }
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(
                .directoryUnavailable,
                "Cannot create the store directory; check that its parent exists and is writable.",
                fileURL: url, underlyingError: error
            )
        }
    }
}
