import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs one inspector command against a store directory.
///
/// Reading commands use the library's public `ReadOnlyPersistentStore`: it takes no lock and
/// never writes, and it reports entries that fail verification as unreadable instead of
/// quarantining them, so they are safe while an app holds the store. Changing commands open
/// the store read-write, which takes its lock.
struct StoreInspector {
    var store: URL
    /// Whether to print JSON instead of tables.
    var json: Bool
    /// How long a request to a running queue waits for its answer, in seconds.
    var wait: TimeInterval = 10
    /// Where output lines go.
    var print: (String) -> Void

    /// Runs `action`.
    ///
    /// - Throws: ``InspectorError`` when the store cannot be read or changed.
    func run(_ action: InspectorCommand.Action) throws {
        try checkIsStore()
        do {
            switch action {
            case .list(let limit, let after, let filter): try list(limit: limit, after: after, filter: filter)
            case .show(let id): try show(id)
            case .export(let id, let output, let payloadOnly): try export(id, output: output, payloadOnly: payloadOnly)
            case .failed(let filter, let payloads): try failed(filter: filter, payloads: payloads)
            case .stats: try stats()
            case .retryFailed(let selection): try retryFailed(selection)
            case .purge(let selection): try purge(selection)
            case .requeueQuarantined(let selection): try requeueQuarantined(selection)
            case .cancel(let target): try cancel(target)
            }
        } catch let error as PersistenceError {
            throw InspectorError.failure(Self.explain(error))
        }
    }

    /// A store opened read-only.
    func readOnlyStore() throws -> ReadOnlyPersistentStore {
        try ReadOnlyPersistentStore(directory: store)
    }

    /// A store opened read-write (taking its lock), for changing commands.
    func writableStore() throws -> RecordStore {
        switch try openForChange() {
        case .opened(let store): return store
        case .held(let holder):
            throw InspectorError.failure(
                "cannot change the store while it is open elsewhere: \(holder) Stop the app first; reading commands (list, show, export, failed, stats) work meanwhile."
            )
        }
    }

    /// What opening the store read-write found.
    enum OpenForChange {
        case opened(RecordStore)
        /// Another process holds the store's lock (a running app, which the changing commands
        /// then ask through the store's inbox); the lock error's message, which names it.
        case held(String)
    }

    /// Opens the store read-write, unless another process holds its lock.
    func openForChange() throws -> OpenForChange {
        do {
            return .opened(try RecordStore(directory: store, access: .readWrite))
        } catch let error as PersistenceError where error.code == .locked {
            return .held(error.message)
        }
    }

    /// Throws a clear error unless the directory exists and is a store: it has a `journal`
    /// directory, or the `pending` and `failed` areas of the earlier layout (a read-write open
    /// would otherwise create a store anywhere).
    private func checkIsStore() throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: store.path, isDirectory: &isDirectory) else {
            throw InspectorError.failure("no store at \(store.path): the directory does not exist")
        }
        guard isDirectory.boolValue else {
            throw InspectorError.failure("no store at \(store.path): it is not a directory")
        }
        let isArea = { (name: String) -> Bool in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: store.appendingPathComponent(name).path, isDirectory: &isDirectory) && isDirectory.boolValue
        }
        guard isArea("journal") || (isArea("pending") && isArea("failed")) else {
            throw InspectorError.failure("\(store.path) is not a store directory: it has no journal/ directory (nor the pending/ and failed/ directories of the earlier layout)")
        }
    }

    /// The message of a store error, without its code tag, for people.
    static func explain(_ error: PersistenceError) -> String {
        var text = error.message
        if let fileURL = error.fileURL { text += " (\(fileURL.path))" }
        return text
    }

    /// Entries a read-only load could not use, as JSON.
    static func json(_ entries: [ReadOnlyPersistentStore.UnreadableEntry], area: String) -> [JSONValue] {
        entries.map { entry in
            .object([
                ("area", .string(area)), ("name", .string(entry.name)),
                ("code", .string(entry.code.name)), ("reason", .string(entry.reason)),
            ])
        }
    }

    /// Entries a read-only load could not use, as text lines.
    static func lines(_ entries: [ReadOnlyPersistentStore.UnreadableEntry], area: String) -> [String] {
        entries.map { "  \(area)/\($0.name): \($0.reason)" }
    }
}
