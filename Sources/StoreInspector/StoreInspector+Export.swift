import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `export` command: one record to a file of its own.
extension StoreInspector {
    /// Writes the pending or failed record `id` names to a new file, in the record format
    /// (``RecordFormat/encode(_:maximumSize:formatVersion:)``: the bytes a `.record` file of the earlier
    /// layout held, which ``RecordFormat/decode(_:maximumSize:)`` reads back equal), or only
    /// its payload's binary property list when `payloadOnly`. `output` defaults to
    /// `<ID>.record` (`<ID>.payload.plist` for a payload) in the current directory.
    ///
    /// The store is opened read-only, like `show`: no lock, nothing in it changed. The record
    /// is the one the journal holds; attempts in flight that only the store's `attempts/`
    /// markers count are not in it (they never were in a record file either). The file is
    /// created, never replaced: an existing file, even a dangling symbolic link, is an error,
    /// and so is a path inside the store directory, where a record file could be taken for
    /// one of the store's own.
    ///
    ///     wrote /tmp/6F1C….record: the record, format version 3 (512 bytes)
    ///     id:    6F1C…
    ///     type:  demo.upload
    ///     area:  failed
    func export(_ id: String, output: String?, payloadOnly: Bool) throws {
        let reader = try RecordStore(directory: store, access: .readOnly)
        let areas = [("pending", try reader.loadPending()), ("failed", try reader.loadFailed())].map { area, report in
            AreaContents(area: area, records: report.records, unreadable: report.skipped.map { ($0.name, $0.reason) })
        }
        guard let (record, area) = try findRecord(id, in: areas, identifier: \.id) else {
            throw InspectorError.failure("no record \(id) in the store \(store.path)")
        }
        // The store's own size cap let the record in: export it whatever the default cap says.
        let bytes = payloadOnly ? record.payload : try RecordFormat.encode(record, maximumSize: .max)
        let destination = URL(fileURLWithPath: output ?? (payloadOnly ? "\(record.id).payload.plist" : "\(record.id).record"))
        try checkIsOutsideStore(destination)
        try Self.writeNewFile(bytes, to: destination.path)
        let content = payloadOnly ? "the payload's binary property list" : "the record, format version \(record.requiredFormatVersion)"
        if json {
            print(JSONValue.object([
                ("exported", .string(destination.path)),
                ("content", .string(payloadOnly ? "payload" : "record")),
                ("bytes", .integer(Int64(bytes.count))),
                ("id", .string(record.id)),
                ("typeIdentifier", .string(record.typeIdentifier)),
                ("area", .string(area)),
            ]).rendered(pretty: true))
            return
        }
        print("wrote \(destination.path): \(content) (\(bytes.count) bytes)")
        print("id:    \(record.id)")
        print("type:  \(record.typeIdentifier)")
        print("area:  \(area)")
    }

    /// Throws unless `destination`'s directory lies outside the store directory (symbolic
    /// links resolved): a `.record` file in the store's `pending/` would be migrated into its
    /// journal by the next read-write open.
    private func checkIsOutsideStore(_ destination: URL) throws {
        let storePath = store.resolvingSymlinksInPath().path
        let directoryPath = destination.deletingLastPathComponent().resolvingSymlinksInPath().path
        if directoryPath == storePath || directoryPath.hasPrefix(storePath.hasSuffix("/") ? storePath : storePath + "/") {
            throw InspectorError.failure("will not write \(destination.path) inside the store directory \(store.path): choose a path outside it (--output PATH)")
        }
    }

    /// Creates the file `path` holding `bytes` (mode 0644, less the umask).
    ///
    /// - Throws: ``InspectorError`` when something is at `path` already, which stays as it
    ///   was, or the file cannot be written (then nothing is left behind).
    static func writeNewFile(_ bytes: Data, to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            let code = errno
            if code == EEXIST {
                throw InspectorError.failure("\(path) exists already; export does not overwrite files: remove it or choose another path (--output PATH)")
            }
            throw InspectorError.failure("cannot create \(path): \(String(cString: strerror(code)))")
        }
        var failure: Int32?
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                offset += written
            }
        }
        if close(descriptor) != 0, failure == nil { failure = errno }
        if let failure {
            unlink(path)
            throw InspectorError.failure("cannot write \(path): \(String(cString: strerror(failure)))")
        }
    }
}
