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
    /// Makes the operation periodic: after each period ends, its record is not removed but
    /// rescheduled for the next one. Default: `nil` (runs once).
    ///
    /// The first period starts at ``notBefore`` (or at once); period *n* targets
    /// `first + n × interval` — measured from the schedule, not from when a run ended, so the
    /// series does not drift — and may start from `flex` seconds before its target. Each
    /// period runs a new instance built from the stored payload, its first attempt passed
    /// `isRetry: false`; a failed attempt is retried by the operation's policy. When a period
    /// ends — succeeded, or failed for good (the retry limit, a non-retriable error) — the
    /// series goes on (``PersistentOperationEvent/periodEnded(_:failure:nextPeriodAt:)``): the
    /// next period is the first target whose window opens after that moment. So after a long
    /// downtime, or when retries outlast the interval, the missed periods run **once**, not once
    /// each (a late run that ends inside the next target's window serves that period too). A
    /// restored series keeps its next date: launching the app does not run it.
    ///
    /// Cancelling the operation (``PersistentOperationQueue/cancelOperation(withID:)``, by tag, or a
    /// ``UniqueKeyPolicy/replaceExisting`` add) ends the series, as does its
    /// ``expirationDate`` and crash-loop protection. A periodic operation cannot have
    /// prerequisites or be one, and cannot be added with
    /// ``PersistentOperationQueue/addOperations(_:options:)``. A unique key names the series:
    /// at most one series holds it.
    ///
    /// ```swift
    /// // A catalogue refresh every hour, at the earliest 10 minutes before the hour is up.
    /// try queue.addOperation(RefreshCatalogue(payload: .init()),
    ///                        options: EnqueueOptions(uniqueKey: "catalogue",
    ///                                                repeating: .every(3600, flex: 600)))
    /// ```
    public var repeating: RepeatSchedule?

    /// Whether the queue holds on to the operation object you add until its first attempt
    /// starts, even while it waits. Default `false`: a waiting operation is held weakly.
    ///
    /// **An operation that waits may run as a new object built from its payload.** The queue
    /// holds an added `RetryingOperation` weakly while it waits — for its ``notBefore`` date,
    /// for its run ``conditions``, or for room behind a large backlog — so that a backlog of
    /// many operations holds their records' few fields, not the objects. As long as your app
    /// holds the object, it is the one that runs (its properties, its KVO observers, its
    /// `waitUntilFinished()`). Once nothing else holds it, the queue builds the operation
    /// again from its payload when it is due, through the type you registered, exactly as it
    /// builds an operation restored after a relaunch: whatever you set on the object after
    /// `init(payload:)` (a `retryPolicy`, a `name`, a closure property) is not on the new one.
    ///
    /// Operations that start at once are not affected, nor is an operation that has a
    /// completion block, has dependencies, is a dependency of one you hold, or is not a
    /// `RetryingOperation` (a plain `Operation`'s cancel cannot be observed before it starts).
    /// Set this to `true` for an operation that carries state its payload does not.
    ///
    /// ```swift
    /// let upload = UploadOperation(payload: payload)
    /// upload.name = "tonight's upload"   // not in the payload: on this object only
    /// try queue.addOperation(upload, options: EnqueueOptions(notBefore: tonight, keepsOperationAlive: true))
    /// ```
    public var keepsOperationAlive: Bool

    /// An ordered lane: the operations added with the same lane run **one at a time, in the
    /// order they were added**, and different lanes run side by side. Default: `nil` (no lane).
    ///
    /// A lane is what a chat's outbox needs: the messages of one conversation go out in order,
    /// while other conversations do not wait. The order holds across retries (an operation
    /// waiting to retry keeps its lane), crashes, relaunches and power cuts: it is saved with
    /// each record, and ``PersistentOperationQueue/restore()`` rebuilds each lane in add order.
    ///
    /// The next operation of a lane starts once the one before it has **ended, however it
    /// ended**: succeeded, failed for good, cancelled, expired, replaced by a unique key. (A
    /// dependency, by contrast, waits for its prerequisite to *succeed*.) Set
    /// ``holdsLaneOnFailure`` to stop the lane instead when an operation fails for good.
    /// Cancelling an operation never cancels the ones behind it.
    ///
    /// Lanes combine with the rest: an operation that is its lane's turn still waits for its
    /// prerequisites, its ``notBefore`` date and its run ``conditions`` (and holds the lane
    /// meanwhile); ``expirationDate`` applies while it waits for its turn; priorities order
    /// operations of different lanes, never the operations within one. An operation waiting
    /// for its turn holds no slot and no timer
    /// (``PersistentOperationInfo/State-swift.enum/waitingForLane``). An operation can be in
    /// one lane; a periodic one (``repeating``) cannot be in any. A batch added with a lane
    /// (``PersistentOperationQueue/addOperations(_:options:)``) joins it in the batch's order,
    /// so an operation of it may depend only on operations before it in the batch.
    ///
    /// Before ``PersistentOperationQueue/restore()``, an add into a lane that has operations an
    /// earlier launch left pending waits for them: it starts after the restore has brought them
    /// back and they have ended.
    ///
    /// ```swift
    /// // Messages of one conversation go out one at a time, in order.
    /// for message in drafts {
    ///     try queue.addOperation(SendMessage(payload: message),
    ///                            options: EnqueueOptions(lane: "chat:\(message.chatID)"))
    /// }
    /// ```
    public var lane: String?

    /// Whether the lane stops when this operation fails for good while it is the lane's
    /// current operation (SQS FIFO's behaviour). Default `false`: the lane moves on to the
    /// next operation. Only meaningful with a ``lane``.
    ///
    /// A holding operation's record moves to the failed area as any failure does, and the
    /// lane's other operations wait — without a slot, a timer or a retry spent, also across
    /// relaunches — until it is re-queued (``PersistentOperationQueue/retryFailedOperation(withID:)``,
    /// when it runs first) or purged (``PersistentOperationQueue/purgeFailedOperation(withID:)``,
    /// when the lane moves on). ``PersistentOperationEvent/laneHeld(lane:by:)`` reports the stop.
    /// Operations waiting behind a held lane do not keep
    /// ``PersistentOperationQueue/waitUntilAllOperationsAreFinished()`` waiting. Only the lane's
    /// current operation holds it: one that expires, or fails because a prerequisite failed,
    /// while it waits for its turn leaves the lane.
    ///
    /// ```swift
    /// let options = EnqueueOptions(lane: "chat:42", holdsLaneOnFailure: true)
    /// try queue.addOperation(SendMessage(payload: message), options: options)
    /// ```
    public var holdsLaneOnFailure: Bool

    /// An idempotency key: a repeated add with the same key stores nothing and returns the
    /// operations the first add stored. Default: `nil`.
    ///
    /// This is what a producer that re-sends after a lost acknowledgement needs (SQS FIFO's
    /// de-duplication identifier): an add with a key that the queue knows returns the
    /// original operations' ids and stores nothing, whatever it was given. The queue knows a
    /// key while an operation added with it is stored, pending or in the failed area, and for
    /// ``PersistentOperationQueue/Configuration/idempotencyWindow`` (five minutes by default)
    /// after the last of them left the store (succeeded, cancelled, expired or purged).
    ///
    /// The key is saved in each record in the same write, and a record's removal remembers
    /// it in the same write too, so a crash, a kill or a power cut at any instant never
    /// leaves work whose key is forgotten while its window lasts: the key is known as soon as
    /// the add returns, also to an add before ``PersistentOperationQueue/restore()`` and in
    /// later launches. Two adds with one key at the same time store it once: the second
    /// waits for the first.
    ///
    /// A key names one add: with ``PersistentOperationQueue/addOperations(_:options:)`` the
    /// whole batch (every member gets the key, and a repeat returns every member's id, in the
    /// batch's order); with ``PersistentOperationQueue/addOperation(_:options:)`` one
    /// operation (a repeat returns ``EnqueueResult/Disposition/keptExisting`` with the first
    /// id). Unlike ``uniqueKey``, which lets one operation at a time hold a key and frees it
    /// when the operation ends, a key here outlives its work, and a repeat never replaces
    /// anything. Keys are compared exactly; at most 1,024 bytes of UTF-8, and not empty.
    ///
    /// ```swift
    /// // A request that may be delivered twice: its id is the key.
    /// let ids = try queue.addOperations(
    ///     photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Hike")) },
    ///     options: EnqueueOptions(idempotencyKey: "request-7f3a"))
    /// // The same request again, within the window: nothing stored, the same ids.
    /// let again = try queue.addOperations(
    ///     photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Hike")) },
    ///     options: EnqueueOptions(idempotencyKey: "request-7f3a"))
    /// assert(again == ids)
    /// ```
    public var idempotencyKey: String?

    /// Creates options; every parameter defaults to "no constraint".
    public init(
        notBefore: Date? = nil,
        tags: Set<String> = [],
        uniqueKey: String? = nil,
        ifUniqueKeyExists: UniqueKeyPolicy = .keepExisting,
        expirationDate: Date? = nil,
        conditions: Set<String> = [],
        repeating: RepeatSchedule? = nil,
        keepsOperationAlive: Bool = false,
        lane: String? = nil,
        holdsLaneOnFailure: Bool = false,
        idempotencyKey: String? = nil
    ) {
        self.idempotencyKey = idempotencyKey
        self.keepsOperationAlive = keepsOperationAlive
        self.lane = lane
        self.holdsLaneOnFailure = holdsLaneOnFailure
        self.notBefore = notBefore
        self.tags = tags
        self.uniqueKey = uniqueKey
        self.ifUniqueKeyExists = ifUniqueKeyExists
        self.expirationDate = expirationDate
        self.conditions = conditions
        self.repeating = repeating
    }
}

/// How a periodic operation repeats (``EnqueueOptions/repeating``): every ``interval``
/// seconds, each period starting at the earliest ``flex`` seconds before its target.
///
/// ```swift
/// let hourly = RepeatSchedule.every(3600)               // at each target
/// let relaxed = RepeatSchedule.every(3600, flex: 900)   // up to 15 minutes early
/// ```
public struct RepeatSchedule: Sendable, Hashable, Codable {
    /// Seconds between the targets of consecutive periods; finite and greater than 0.
    public var interval: TimeInterval
    /// How many seconds before its target a period may start; between 0 and ``interval``.
    ///
    /// The queue starts a period as soon as its window opens, so in a foreground app a
    /// period starts `flex` seconds before its target. The window is what lets a background
    /// run (``PersistentOperationQueue/startBoundedRun(until:idleLimit:stopGracePeriod:)``)
    /// that the system grants a little early take the period in, and
    /// ``PersistentOperationQueue/nextDueDate`` reports the window's start. The next target
    /// is measured from this one, not from when the period ran.
    public var flex: TimeInterval

    /// A schedule of `interval` seconds with a window of `flex` seconds before each target.
    public init(interval: TimeInterval, flex: TimeInterval = 0) {
        self.interval = interval
        self.flex = flex
    }

    /// A schedule of `interval` seconds with a window of `flex` seconds before each target.
    public static func every(_ interval: TimeInterval, flex: TimeInterval = 0) -> RepeatSchedule {
        RepeatSchedule(interval: interval, flex: flex)
    }

    /// Why the schedule cannot be used, or `nil`.
    var problem: String? {
        guard interval.isFinite, interval > 0 else { return "the repeat interval must be a finite number of seconds greater than 0 (it is \(interval))" }
        guard flex.isFinite, flex >= 0, flex <= interval else { return "the flex window must be between 0 and the interval, \(interval) s (it is \(flex))" }
        return nil
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
