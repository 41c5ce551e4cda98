import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The inbox: requests from other processes to the queue that holds a store.
//
//     <directory>/inbox/<name>.request    a request, JSON, written whole and renamed into place
//     <directory>/inbox/<name>.response   the queue's answer, written the same way
//
// Another process (`store-inspector`) cannot change a store a running queue holds: the store's
// lock is the queue's. It leaves a request instead, and the queue takes it in: after its
// restore, and then whenever a request arrives (it watches the directory: inotify on Linux, a
// vnode source on Apple platforms; no polling). For each request, oldest first, the queue does
// what it asks through its public API, writes the response, then removes the request. A crash
// between the two leaves the request, done again at the next launch: every action is one that
// may be done twice (re-queue, purge and cancel of an operation that no longer is where the
// request expects it are reported as such, and change nothing). A requester that finds a
// response removes it; a response no one collects is removed a day after it was written.
//
// Request names start with the time in microseconds (16 hexadecimal digits, increasing within
// a process), so that the names sort in the order the requests were made, then a random part.

/// The inbox of a store: requests another process leaves for the queue that holds the store,
/// and the queue's responses (see the comment at the top of this file).
///
/// ```swift
/// let inbox = StoreInbox(directory: URL(fileURLWithPath: "/var/lib/thumbnails"))
/// let name = try inbox.send(StoreInbox.Request(action: .retryFailed, all: true))
/// // … the queue that holds the store takes it in …
/// if let response = inbox.response(to: name) { print(response.message) }
/// ```
package struct StoreInbox: Sendable {
    /// What a request asks of the queue.
    package struct Request: Codable, Sendable, Equatable {
        package enum Action: String, Codable, Sendable {
            /// Re-queue failed operations (`ids`, or every one with `all`).
            case retryFailed
            /// Delete failed operations (`ids`, or every one with `all`).
            case purgeFailed
            /// Cancel operations (`ids`, or those tagged `tag`).
            case cancel
        }

        /// The request format; a queue answers a version it does not know with a failure.
        package var formatVersion = 1
        package var action: Action
        /// The operations it names (record identifiers).
        package var ids: [String] = []
        /// Every failed operation (`retryFailed`, `purgeFailed`).
        package var all = false
        /// The operations tagged so (`cancel`).
        package var tag: String?

        package init(action: Action, ids: [String] = [], all: Bool = false, tag: String? = nil) {
            self.action = action
            self.ids = ids
            self.all = all
            self.tag = tag
        }
    }

    /// The queue's answer to a request.
    package struct Response: Codable, Sendable, Equatable {
        /// Whether everything asked was done.
        package var succeeded: Bool
        /// What was done, for people.
        package var message: String
        /// The operations it changed.
        package var affected: [String]

        package init(succeeded: Bool, message: String, affected: [String]) {
            self.succeeded = succeeded
            self.message = message
            self.affected = affected
        }
    }

    /// The request format this library writes and reads.
    package static let formatVersion = 1
    /// The largest request or response file read: 1 MiB.
    package static let maximumFileSize = 1 << 20
    static let requestExtension = ".request"
    static let responseExtension = ".response"

    /// The inbox directory, `<store>/inbox`.
    package let path: String
    let fileSystem: FileSystem

    /// The inbox of the store at `directory`.
    package init(directory: URL, fileSystem: FileSystem = .system) {
        path = StoreLayout(directory: directory).root + "/inbox"
        self.fileSystem = fileSystem
    }

    /// Creates the inbox directory (0700) when it is missing.
    ///
    /// - Throws: ``PersistenceError/Code/directoryUnavailable`` when it cannot be created.
    package func create() throws {
        if let status = try? fileSystem.linkStatus(path) {
            guard status.kind == .directory else {
                throw PersistenceError(.directoryUnavailable, "The store's inbox exists but is not a directory.", fileURL: URL(fileURLWithPath: path))
            }
            return
        }
        do {
            try fileSystem.makeDirectory(path, StoreLayout.directoryPermissions)
            try fileSystem.setPathPermissions(path, StoreLayout.directoryPermissions)
            try fileSystem.synchronizeDirectory((path as NSString).deletingLastPathComponent)
        } catch let error as SystemCallError where error.code == EEXIST {
            return
        } catch {
            throw PersistenceError(.directoryUnavailable, "Cannot create the store's inbox.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
    }

    /// Leaves `request` for the queue, durably (written, flushed, renamed into place, the
    /// directory flushed), and returns its name.
    ///
    /// - Throws: ``PersistenceError/Code/writeFailed`` when it cannot be written.
    package func send(_ request: Request) throws -> String {
        try create()
        return try leave(try JSONEncoder().encode(request), withExtension: Self.requestExtension, what: "a request")
    }

    /// The last time this process named a file of an inbox, so that its names increase.
    private static let lastNameTime = Locked<UInt64>(0)

    /// Writes `bytes` durably (written, flushed, renamed into place, the directory flushed)
    /// as a new file of the inbox with `fileExtension`, and returns its name: the time in
    /// microseconds (16 hexadecimal digits, increasing within this process), then a random
    /// part, so that names sort in the order the files were left.
    ///
    /// - Throws: ``PersistenceError/Code/writeFailed``, saying it could not leave `what`.
    func leave(_ bytes: Data, withExtension fileExtension: String, what: String) throws -> String {
        let now = UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000))
        let time = Self.lastNameTime.withLock { last -> UInt64 in
            last = max(last + 1, now)
            return last
        }
        let name = String(format: "%016llx", time) + "-" + UUID().uuidString.prefix(8)
        do {
            try DurableFile(fileSystem: fileSystem).replaceContents(of: path + "/" + name + fileExtension, with: bytes)
            try fileSystem.synchronizeDirectory(path)
        } catch {
            throw PersistenceError(.writeFailed, "Cannot leave \(what) in the store's inbox.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
        return name
    }

    /// The names (without the extension) of the inbox's files with `fileExtension`, oldest
    /// first; temporary files are not among them.
    func names(withExtension fileExtension: String) -> [String] {
        guard let names = try? fileSystem.contentsOfDirectory(path) else { return [] }
        return names.filter { $0.hasSuffix(fileExtension) && !$0.hasPrefix(".") }.sorted().map { String($0.dropLast(fileExtension.count)) }
    }

    /// The requests waiting, oldest first, each read or with what is wrong with it.
    package func pendingRequests() -> [(name: String, request: Result<Request, PersistenceError>)] {
        names(withExtension: Self.requestExtension).map { name in
            (name, Result { try read(Request.self, name + Self.requestExtension) }.mapError { error in
                error as? PersistenceError ?? PersistenceError(.corruptRecord, "The request cannot be read: \(error)")
            })
        }
    }

    /// Answers request `name` with `response`, then removes the request (each durably).
    ///
    /// - Throws: ``PersistenceError/Code/writeFailed`` when either step fails.
    package func respond(to name: String, with response: Response) throws {
        do {
            try DurableFile(fileSystem: fileSystem).replaceContents(of: path + "/" + name + Self.responseExtension, with: try JSONEncoder().encode(response))
            try fileSystem.unlink(path + "/" + name + Self.requestExtension)
            try fileSystem.synchronizeDirectory(path)
        } catch {
            throw PersistenceError(.writeFailed, "Cannot answer a request in the store's inbox.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
    }

    /// The response to request `name`, once there is one.
    package func response(to name: String) -> Response? {
        try? read(Response.self, name + Self.responseExtension)
    }

    /// Whether request `name` still waits to be taken in.
    package func isWaiting(_ name: String) -> Bool {
        (try? fileSystem.linkStatus(path + "/" + name + Self.requestExtension)) != nil
    }

    /// Removes the response to request `name` (its requester read it).
    package func removeResponse(to name: String) {
        try? fileSystem.unlink(path + "/" + name + Self.responseExtension)
    }

    /// Removes responses written more than `age` seconds ago (by their modification date) that
    /// no one collected.
    package func removeResponses(olderThan age: TimeInterval, now: Date = Date()) {
        removeFiles(olderThan: age, now: now) { $0.hasSuffix(Self.responseExtension) }
    }

    /// Removes the temporary files of writes that never finished (a producer killed while it
    /// wrote a letter or a request) once they are `age` seconds old: a younger one may be a
    /// write under way.
    package func removeTemporaryFiles(olderThan age: TimeInterval, now: Date = Date()) {
        removeFiles(olderThan: age, now: now, named: StoreLayout.isTemporaryFileName)
    }

    /// Removes the files of the inbox that `isIncluded` names, modified more than `age`
    /// seconds before `now`.
    private func removeFiles(olderThan age: TimeInterval, now: Date, named isIncluded: (String) -> Bool) {
        guard let names = try? fileSystem.contentsOfDirectory(path) else { return }
        for name in names where isIncluded(name) {
            let file = path + "/" + name
            if let written = (try? FileManager.default.attributesOfItem(atPath: file))?[.modificationDate] as? Date,
               now.timeIntervalSince(written) > age {
                try? fileSystem.unlink(file)
            }
        }
    }

    private func read<Value: Decodable>(_ type: Value.Type, _ file: String) throws -> Value {
        let result = try DurableFile(fileSystem: fileSystem).read(path + "/" + file, maximumSize: Self.maximumFileSize)
        guard case .contents(let bytes) = result else {
            throw PersistenceError(.corruptRecord, "\(file) is not a regular file of at most \(Self.maximumFileSize) bytes.")
        }
        do {
            return try JSONDecoder().decode(Value.self, from: bytes)
        } catch {
            throw PersistenceError(.corruptRecord, "\(file) is not a request this library reads: \(error)")
        }
    }
}

/// Calls a handler on `queue` whenever an entry is added to or renamed into a directory
/// (inotify on Linux, a vnode dispatch source on Apple platforms), until cancelled.
final class DirectoryWatcher: @unchecked Sendable {
    // @unchecked: `source` is set once in `init` and only cancelled afterwards.
    private let source: any DispatchSourceProtocol

    /// Watches `path`; `nil` when the platform or the directory does not allow it.
    init?(path: String, queue: DispatchQueue, handler: @escaping @Sendable () -> Void) {
        #if canImport(Glibc)
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return nil }
        guard inotify_add_watch(descriptor, path, UInt32(IN_MOVED_TO | IN_CLOSE_WRITE)) >= 0 else {
            Glibc.close(descriptor)
            return nil
        }
        let source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        source.setEventHandler {
            // Drain the events: which entry changed does not matter, the handler looks at all.
            var buffer = [UInt8](repeating: 0, count: 4_096)
            while buffer.withUnsafeMutableBytes({ Glibc.read(descriptor, $0.baseAddress, $0.count) }) > 0 {}
            handler()
        }
        source.setCancelHandler { Glibc.close(descriptor) }
        self.source = source
        source.resume()
        #elseif canImport(Darwin)
        let descriptor = open(path, O_EVTONLY)
        guard descriptor >= 0 else { return nil }
        let source = DispatchSource.makeFileSystemObjectSource(fileDescriptor: descriptor, eventMask: .write, queue: queue)
        source.setEventHandler(handler: handler)
        source.setCancelHandler { Darwin.close(descriptor) }
        self.source = source
        source.resume()
        #else
        return nil
        #endif
    }

    /// Stops watching; the handler is not called again once a call under way has returned.
    func cancel() {
        source.cancel()
    }
}
