import Foundation

/// Adds operations to a store from another process — an app extension, a widget, an intent —
/// without opening the store or taking its lock.
///
/// A ``PersistentOperationQueue`` holds its store alone: a second process that opens it gets
/// ``PersistenceError/Code/locked``. An extension adds through the store's inbox instead. Each
/// add leaves a *letter* in `<directory>/inbox`: the operations' payloads, encoded as the queue
/// stores them, written to a temporary file, flushed, renamed into place and the directory
/// flushed — as durable when the add returns as ``PersistentOperationQueue/addOperation(_:)``.
/// An add cut short (the process killed while it writes) leaves no letter, only a temporary
/// file that the queue removes once it is an hour old. The producer must run as the user that
/// owns the store (its directories are private to that user, mode 0700).
/// The queue that holds the store takes letters in when ``PersistentOperationQueue/restore()``
/// runs, and, while it runs, as each one arrives (it watches the directory: no polling).
///
/// ```swift
/// // In the share extension (a process of its own), with the app's shared store:
/// let inbox = PersistentOperationInbox(directory: sharedStoreURL)
/// try inbox.addOperation(UploadPhoto(payload: PhotoPayload(file: photo, album: "Hike")),
///                        options: EnqueueOptions(tags: ["album:Hike"]))
/// // The app's queue takes the upload in at its next restore(), or now if it is running.
/// ```
///
/// **Taken in once, in order.** The queue stores a letter's operations as one batch (all or
/// none) with the idempotency key `inbox:<letter name>` (or the
/// ``EnqueueOptions/idempotencyKey`` the letter carries), removes the letter, and only then
/// starts them. Whichever process is killed at whatever moment, an added operation is neither
/// lost nor stored twice. Letters are taken in in the order they were written; a producer's
/// operations added with one ``EnqueueOptions/lane`` run in that order.
///
/// **What the queue cannot take in waits, or is set aside.** A letter naming a type the
/// queue has not registered, or written by a later version of this library, waits in the
/// inbox — with the later letters of its producer, so that their order holds — until a queue
/// that knows it opens the store (the queue logs it). A letter that cannot be read, or whose
/// payload the registered type cannot decode, is renamed `<name>.rejected` and kept; the
/// queue logs why. Nothing is deleted.
///
/// **Options.** As ``PersistentOperationQueue/addOperations(_:options:)``: a not-before date,
/// tags, an expiration date, conditions, a lane and an idempotency key. A unique key or a
/// repeat schedule throws ``PersistenceError/Code/invalidOptions``: add those from the app.
///
/// **The store's lock.** The inbox takes none: on iOS, a process suspended while it holds a
/// file lock in an App Group container is killed (`0xdead10cc`), and an extension is
/// suspended often. Only the app opens the store; see
/// ``PersistentOperationQueue/Configuration/releasesStoreLockWhenInactive`` for the app's own
/// lock. Turn take-in off with ``PersistentOperationQueue/Configuration/takesOperationsFromOtherProcesses``.
///
/// Thread safety: a value type; use it from any thread and any number of processes at once.
public struct PersistentOperationInbox: Sendable {
    /// The store directory, as given to ``PersistentOperationQueue/init(directory:operationQueue:configuration:)``.
    public let directory: URL
    /// Who adds: letters name it, and a producer's letters are taken in in order.
    public let producer: String
    private let inbox: StoreInbox

    /// The inbox of the store at `directory`, for `producer` (by default, the process's name).
    ///
    /// Creating it touches no file: the store directory and its inbox are created by the
    /// first add when missing.
    public init(directory: URL, producer: String = ProcessInfo.processInfo.processName) {
        self.init(directory: directory, producer: producer, fileSystem: .system)
    }

    package init(directory: URL, producer: String, fileSystem: FileSystem) {
        self.directory = directory
        self.producer = producer
        inbox = StoreInbox(directory: directory, fileSystem: fileSystem)
    }

    /// Leaves `operation` for the queue that holds the store, durably.
    ///
    /// ```swift
    /// let inbox = PersistentOperationInbox(directory: sharedStoreURL)
    /// try inbox.addOperation(SyncOperation(payload: sync), options: EnqueueOptions(lane: "sync"))
    /// ```
    ///
    /// - Throws: ``PersistenceError``: ``PersistenceError/Code/payloadNotEncodable`` /
    ///   ``PersistenceError/Code/payloadDoesNotRoundTrip`` when the payload cannot be stored
    ///   exactly, ``PersistenceError/Code/invalidOptions`` for a unique key or a repeat
    ///   schedule, ``PersistenceError/Code/invalidDependency`` when it depends on an operation,
    ///   ``PersistenceError/Code/recordTooLarge`` beyond 16 MiB,
    ///   ``PersistenceError/Code/writeFailed`` / ``PersistenceError/Code/directoryUnavailable``
    ///   when the disk fails. After an error nothing was left for the queue.
    public func addOperation<Op: PersistentOperation>(_ operation: Op, options: EnqueueOptions = EnqueueOptions()) throws {
        try addOperations([operation], options: options)
    }

    /// Leaves `operations` for the queue as one batch: it stores them all or none, in one add.
    /// Dependencies among them (`addDependency(_:)`, before this call) are kept; an operation
    /// may depend on no other.
    ///
    /// ```swift
    /// let album = CreateAlbum(payload: AlbumPayload(name: "Hike"))
    /// let uploads = photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Hike")) }
    /// for upload in uploads { upload.addDependency(album) }
    /// try PersistentOperationInbox(directory: sharedStoreURL).addOperations([album] + uploads)
    /// ```
    ///
    /// - Throws: the errors of ``addOperation(_:options:)``, for any member.
    public func addOperations(_ operations: [any PersistentOperation], options: EnqueueOptions = EnqueueOptions()) throws {
        if options.uniqueKey != nil || options.repeating != nil {
            throw PersistenceError(
                .invalidOptions,
                "An inbox takes the options of addOperations(_:options:): no unique key and no repeat schedule. Add such operations from the process that holds the store."
            )
        }
        if let key = options.idempotencyKey { try PersistentOperationQueue.checkIdempotencyKey(key) }
        guard !operations.isEmpty else { return }
        let positions = Dictionary(operations.enumerated().map { (ObjectIdentifier($1), $0) }, uniquingKeysWith: { first, _ in first })
        guard positions.count == operations.count else {
            throw PersistenceError(.operationAlreadyAdded, "addOperations(_:) was given the same operation twice; nothing was left.")
        }
        var members: [StoreInbox.Letter.Operation] = []
        members.reserveCapacity(operations.count)
        for operation in operations {
            let prerequisites = try operation.dependencies.map { dependency -> Int in
                guard let position = positions[ObjectIdentifier(dependency)] else {
                    throw PersistenceError(
                        .invalidDependency,
                        "\(type(of: operation)) depends on an operation that is not in this add; an inbox keeps dependencies among the operations of one add only. Nothing was left."
                    )
                }
                return position
            }
            members.append(try Self.member(operation, prerequisites: prerequisites))
        }
        if members.contains(where: { !$0.prerequisites.isEmpty }) {
            try PersistentOperationQueue.checkAcyclic(
                ids: members.indices.map(String.init), prerequisites: members.map { $0.prerequisites.map(String.init) }, operations: operations
            )
        }
        _ = try inbox.send(StoreInbox.Letter(producer: producer, operations: members, options: .init(options)))
    }

    /// The number of letters the queue has not taken in yet (each add leaves one).
    public var waitingCount: Int {
        inbox.letterNames().count
    }

    private static func member<Op: PersistentOperation>(_ operation: Op, prerequisites: [Int]) throws -> StoreInbox.Letter.Operation {
        StoreInbox.Letter.Operation(
            typeIdentifier: Op.persistenceIdentifier, payloadVersion: Op.payloadVersion,
            payload: try RecordFormat.encodePayload(operation.payload),
            priority: operation.queuePriority.rawValue, prerequisites: prerequisites
        )
    }
}
