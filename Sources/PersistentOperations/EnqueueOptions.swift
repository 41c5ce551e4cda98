import Foundation

/// How ``PersistentOperationQueue/addOperation(_:options:)`` stores and schedules an operation.
///
/// The operation's priority is its own `queuePriority`, saved with it.
///
/// ```swift
/// var options = EnqueueOptions()
/// options.notBefore = Date().addingTimeInterval(3600)        // not before an hour from now
/// options.tags = ["uploads", "album:42"]                     // to query or cancel by tag
/// options.uniqueKey = "sync-contacts"                        // at most one of these at a time
/// options.ifUniqueKeyExists = .replaceExisting
/// try queue.addOperation(SyncOperation(payload: sync), options: options)
/// ```
public struct EnqueueOptions: Sendable, Hashable {
    /// What to do when a pending operation already has the same ``uniqueKey``.
    public enum UniqueKeyPolicy: Sendable, Hashable {
        /// Keep the existing operation and do not store the new one (the default).
        case keepExisting
        /// Store the new operation, then cancel and remove the existing one (and the
        /// operations that depend on it, as any cancellation does).
        case replaceExisting
    }

    /// The first attempt starts no earlier than this date. Default: `nil` (as soon as possible).
    ///
    /// Until then the operation waits in the queue's timer, not in its `OperationQueue`.
    public var notBefore: Date?
    /// Labels for ``PersistentOperationQueue/operations(taggedWith:)`` and
    /// ``PersistentOperationQueue/cancelOperations(taggedWith:)``. Default: none.
    public var tags: Set<String>
    /// A custom identifier of the work: at most one pending operation has a given key.
    /// Default: `nil`.
    ///
    /// The key deduplicates pending work only: once its operation has succeeded, been cancelled
    /// or moved to the failed area, the key is free, and adding again runs the work again. An
    /// app that re-adds after a launch was killed should skip what ``PersistentOperationQueue/restore()``
    /// brought back, not rely on the key, since the restored operation may finish first.
    ///
    /// Pending includes the operations an earlier launch left in the store, also before
    /// ``PersistentOperationQueue/restore()`` has run: the first add with a unique key before
    /// then reads the keys of the stored records (once), so a stored operation is kept (it runs
    /// after the restore) or replaced (its record, and those of the stored operations that
    /// depend on it, removed and reported ``PersistentOperationEvent/cancelled(_:)``) according
    /// to ``ifUniqueKeyExists``. Adds without a key never read the store for it.
    ///
    /// ```swift
    /// // Before restore(): a sync of this album left pending by the last launch is kept.
    /// let result = try queue.addOperation(
    ///     SyncOperation(payload: sync), options: EnqueueOptions(uniqueKey: "sync-album-42"))
    /// if result.disposition == .keptExisting { print("\(result.id) runs after restore()") }
    /// try queue.restore()
    /// ```
    public var uniqueKey: String?
    /// What happens when ``uniqueKey`` is already taken. Default: ``UniqueKeyPolicy/keepExisting``.
    public var ifUniqueKeyExists: UniqueKeyPolicy
    /// No attempt starts at or after this date. Default: `nil` (never expires).
    ///
    /// Saved with the record. An operation still pending at the date — scheduled, waiting for
    /// a slot, for its prerequisites or for a retry — ends failed: its record moves to the
    /// failed area with an "expired" reason (a `RetryingOperationError` with code
    /// `expired`), and its dependents fail with it.
    /// ``PersistentOperationQueue/restore()`` does the same to records that expired while the
    /// app was not running (``RestoreReport/expired``). An attempt already running at the date
    /// may finish; a `RetryingOperation` does not retry after it. The operation's own
    /// `RetryingOperation.expirationDate`, when set, is saved too (the earlier date wins).
    /// Dates are read from the queue's clock (``PersistentOperationQueue/Configuration/scheduler``).
    ///
    /// ```swift
    /// // A sync that is worthless after tonight.
    /// try queue.addOperation(SyncOperation(payload: sync),
    ///                        options: EnqueueOptions(expirationDate: tonight))
    /// ```
    public var expirationDate: Date?
    /// Names of run conditions that must all hold before each attempt starts. Default: none.
    ///
    /// Saved with the record. Each name needs a provider registered with
    /// ``PersistentOperationQueue/register(_:as:)`` before the add (otherwise the add throws
    /// ``PersistenceError/Code/unknownCondition``). A due operation whose conditions do not all
    /// hold waits without a slot, a timer or a retry spent, and without polling; when a
    /// provider reports a change that makes them hold, the waiting operations start at once, in
    /// priority then enqueue order. A running attempt is not interrupted when a condition stops
    /// holding. After a restart, a record naming a condition no provider is registered for
    /// waits (and is reported in ``RestoreReport/unknownConditions``) until one is.
    ///
    /// ```swift
    /// queue.register(online, as: "network")
    /// try queue.addOperation(UploadOperation(payload: upload),
    ///                        options: EnqueueOptions(conditions: ["network"]))
    /// ```
    public var conditions: Set<String>

    /// Creates options; every parameter defaults to "no constraint".
    public init(
        notBefore: Date? = nil,
        tags: Set<String> = [],
        uniqueKey: String? = nil,
        ifUniqueKeyExists: UniqueKeyPolicy = .keepExisting,
        expirationDate: Date? = nil,
        conditions: Set<String> = []
    ) {
        self.notBefore = notBefore
        self.tags = tags
        self.uniqueKey = uniqueKey
        self.ifUniqueKeyExists = ifUniqueKeyExists
        self.expirationDate = expirationDate
        self.conditions = conditions
    }
}

/// What ``PersistentOperationQueue/addOperation(_:options:)`` did.
public struct EnqueueResult: Sendable, Hashable {
    /// What became of the operation passed in.
    public enum Disposition: Sendable, Hashable {
        /// Stored; it will run.
        case added
        /// Not stored: a pending operation with the same unique key was kept (it is ``id``).
        case keptExisting
        /// Stored, after cancelling and removing the pending operation with the same unique key.
        case replaced(PersistentOperationID)
    }

    /// The identifier of the operation that now holds the work: the new one, or the kept one.
    public var id: PersistentOperationID
    /// What happened.
    public var disposition: Disposition
}
