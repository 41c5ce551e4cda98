import Foundation

/// An operation queue whose pending operations survive a crash or a kill: each one is saved
/// as a property-list file before ``addOperation(_:)`` returns, and ``restore()`` re-adds
/// them on the next launch.
///
/// ```swift
/// let queue = try PersistentOperationQueue(directory: appSupport.appendingPathComponent("uploads"))
/// queue.register(UploadOperation.self)
/// let report = try queue.restore()            // resumes what the last run left pending
/// try queue.addOperation(UploadOperation(payload: Upload(file: photo, attempt: 0)))
/// ```
///
/// **How operations run.** Attempts run in ``operationQueue`` (its
/// `maxConcurrentOperationCount`, `isSuspended` and the operations' `queuePriority` apply),
/// but the stored operations themselves are not added to it: the queue adds a placeholder
/// that holds a slot for the length of one attempt. A `RetryingOperation` waiting for a
/// retry, and an operation whose not-before date is in the future, hold no slot and are not
/// parked in the `OperationQueue`; they wait in the queue's single timer. Due work beyond a
/// window of slots (four per `maxConcurrentOperationCount`, at least 64; 1,000 for an
/// unbounded queue) waits in the queue's own ready list, in priority then enqueue order, and
/// gets a slot as one frees up. Cancelling the placeholders in the `OperationQueue` (its
/// `cancelAllOperations()`) does not cancel stored operations — they get new slots; use
/// ``cancelAllOperations()`` of this queue.
///
/// **Dependencies are saved.** `b.addDependency(a)` before adding `b`, for an `a` of this
/// queue, is stored with `b`'s record: `b` starts only after `a` has succeeded, in this launch
/// or an earlier one, and waits without a slot or a timer. If `a` fails for good, `b` fails
/// too; if `a` is cancelled, so is `b`. ``addOperations(_:)`` stores a batch all or none. See
/// <doc:OperationGraphs>.
///
/// **Restored operations are built when due.** ``restore()`` checks every record (its
/// payload is decoded) but builds a restored operation only when its first attempt starts,
/// or when a query such as ``operations()`` returns it, reading its payload from its file
/// again: a launch with a large backlog holds a small entry per record, not operations.
///
/// **Lifecycle on disk.** Success or cancellation removes the record. Before a retry wait
/// starts the record is rewritten with the retry count and the next-attempt date. A
/// non-retriable failure (or the retry limit) moves the record to the failed area, from
/// which ``retryFailedOperation(withID:)`` and ``retryAllFailedOperations()`` re-queue it.
///
/// **Guarantees.** Execution is at least once: an attempt running when the process dies
/// runs again after ``restore()``; an operation that completed never runs again after a
/// process crash (after a power cut, one that completed in the last moments may). See
/// <doc:ResumingAfterACrash>.
///
/// One process at a time may open a store directory: a second one gets
/// ``PersistenceError/Code/locked``. The lock is released by the OS when the holder dies.
///
/// Thread safety: every method may be called from any thread. Events, operations' code and
/// KVO notifications never run while the queue holds its lock.
public final class PersistentOperationQueue: @unchecked Sendable {
    // @unchecked: mutable state lives in `state` (a `Locked`) and `finishedCondition`'s
    // counters; `store`, `timer`, `events` and `configuration` are immutable references.

    struct RegisteredType: Sendable {
        /// Builds the operation from a stored payload and the payload version it was stored with.
        var makeOperation: @Sendable (Data, Int) throws -> Operation
        /// Decodes a payload without building an operation (a re-queue checks its records).
        var checkPayload: @Sendable (Data, Int) throws -> Void
        /// The type's ``PersistentOperation/payloadVersion``: a record stored with a later one
        /// is left alone.
        var payloadVersion: Int
    }

    struct State: Sendable {
        var registry: [String: RegisteredType] = [:]
        var entries = EntryTable()
        var idsByOperation: [ObjectIdentifier: String] = [:]
        /// Where the next sweep for released parked operations starts (see `+Release`).
        var releaseSweepPosition = 0
        var unknownTypeRecords: [String: UnknownTypeRecord] = [:]
        var isClosed = false
        /// ``PersistentOperationQueue/shutDown(gracePeriod:stopGracePeriod:)`` began: nothing
        /// new starts, and the queue closes once the attempts in flight have ended or stopped.
        var isShuttingDown = false
        var emptyWaiters: [EmptyWaiter] = []
        /// Slots added to the `OperationQueue` that have not finished.
        var slotsInQueue = 0
        /// Due operations waiting for room in the `OperationQueue`, first to run first.
        var ready = ReadyQueue()
        /// Slots in the `OperationQueue` per tag with a concurrency limit, and the due
        /// operations parked for each such tag, first to run first (see `+ConcurrencyLimits`).
        var limitCounts: [String: Int] = [:]
        var limitWaiters: [String: Heap<ReadySlot>] = [:]
        /// The start buckets of the tags with a start-rate limit, the starts of each reserved by
        /// slots not started yet and those slots, the due operations parked for each such tag,
        /// first to run first, and the tags whose wake-up is set (see `+RateLimits`).
        var rateBuckets: [String: StartBucket] = [:]
        var rateReserved: [String: Int] = [:]
        var rateReservingSlots: Set<ObjectIdentifier> = []
        var rateWaiters: [String: Heap<ReadySlot>] = [:]
        var rateWakes: Set<String> = []
        /// While bounded runs of scopes only are active, their scopes: the others' due work is
        /// parked under `focusKey` (see `+BoundedRuns`); `nil` otherwise.
        var focus: Set<ProgressScope>?
        /// The groups whose progress was asked for (see `ProgressGroups`).
        var progressGroups = ProgressGroups()
        /// With fair sharing: each group's next turn, and the turn of the last slot taken
        /// from `ready` (see `+FairShare`).
        var fairShare = FairShareRounds()
        /// For each unfinished prerequisite, the entries blocked on it (see `+Graph`).
        var dependents: [String: [String]] = [:]
        /// Live operations this queue tracked that have finished, and how, for dependents
        /// added later (see `+Graph`).
        var finishedOperations: [ObjectIdentifier: FinishedOperation] = [:]
        var finishedOperationsPruneThreshold = 64
        /// Tracked entries per batch whose records still carry its identifier.
        var batchMembers: [String: Int] = [:]
        /// Batches being written by `addOperations`: their records are on disk before their
        /// commit marker, and `restore()` must not take them for an interrupted batch.
        var batchesInProgress: Set<String> = []
        /// Whether a ``PersistentOperationQueue/restore()`` has completed: from then on the
        /// entries cover every pending record an earlier launch left.
        var hasRestored = false
        /// Before then, the unique keys of the pending records on disk that are not entries,
        /// each with its records' identifiers, newest last; `nil` until an add with a unique
        /// key first needs them (see `+StoredKeys`).
        var storedUniqueKeys: [String: [String]]?
        /// Operations whose next attempt runs alone, in the order they run; while any remain,
        /// the first one is the only operation given a slot (see `+Isolation`).
        var isolation: [String] = []
        /// Operations whose next attempt runs alone once no other work is due or in flight
        /// (suspects of kills), in the order they run; each moves to `isolation` when its
        /// turn comes (see `+Isolation`).
        var isolationAfterOthers: [String] = []
        /// Whether each registered run condition held when its provider last reported; a name
        /// without a provider is absent, and does not hold (see `+Conditions`).
        var conditionStates: [String: Bool] = [:]
        /// The due entries waiting for each run condition that did not hold when they became due
        /// (and for each pause, under its key: see `+Pauses`).
        var conditionWaiters: [String: Set<String>] = [:]
        /// The pauses in force, by key (see `+Pauses`).
        var pauses: [String: ActivePause] = [:]
        /// Entries that must run alone but cannot start now (they wait for a date, for
        /// prerequisites or for a run condition): back at the end of `isolation` when they
        /// become due (see `+Isolation`).
        var waitingToRunAlone: Set<String> = []
        /// Periodic entries between two periods (see `+Periodic`): the queue counts as idle
        /// when these are all it holds.
        var seriesBetweenPeriods: Set<String> = []
        /// Entries whose retry wait has begun but whose record is still being saved (see
        /// `+Attempts`): a bounded run's stop waits for them.
        var retriesBeingSaved: Set<String> = []
        /// The ordered lanes with entries or a holder, by name (see `+Lanes`).
        var lanes: [String: Lane] = [:]
        /// The failed records that hold their lanes, with the lane each holds.
        var laneHolders: [String: String] = [:]
        /// Entries waiting in lanes that a failure holds: they cannot run until it is
        /// re-queued or purged, so the queue counts as idle without them.
        var heldLaneWaiters = 0
        /// Before the first restore, the lanes of the pending records on disk that are not
        /// entries, and of the failed records holding lanes; `nil` until an add into a lane
        /// first needs them (see `+Lanes`).
        var storedLanes: Set<String>?

        /// Whether every entry left is a periodic series waiting for its next period, or waits
        /// behind a held lane: what `waitUntilAllOperationsAreFinished()` waits for.
        var isIdle: Bool { entries.count == seriesBetweenPeriods.count + heldLaneWaiters }
    }

    /// The queue the attempts run in.
    public let operationQueue: OperationQueue
    /// The settings the queue was created with.
    public let configuration: Configuration
    /// The store directory.
    public let directory: URL

    let store: RecordStore
    let timer: DueTimer
    let hub = EventHub()
    let state = Locked(State())
    /// The registered run condition providers and their observations, by name.
    let conditionProviders = Locked<[String: RegisteredCondition]>([:])
    /// The active bounded runs (see `+BoundedRuns`).
    let runs = Locked<[ObjectIdentifier: BoundedRun]>([:])
    /// Serialises a run's start (registering it, resuming the queue) with the end of the last
    /// run (suspending it). Held only around those two steps.
    let runTransitions = NSLock()
    /// Where the providers' change reports are handled, one at a time and in order.
    let conditionQueue = DispatchQueue(label: "PersistentOperationQueue.conditions")
    /// Serialises adds that carry a unique key, so two cannot both see the key free.
    let uniqueKeyLock = NSLock()
    /// The idempotency keys adds are storing now (see `+Idempotency`): an add with a key waits
    /// while another holds it.
    let idempotencyKeysBeingAdded = KeyReservations()
    /// The watch of the store's inbox (see `+Inbox`), and the queue that takes its requests
    /// in, one at a time.
    let inbox = Locked(InboxState())
    let inboxQueue = DispatchQueue(label: "PersistentOperationQueue.inbox")
    /// Where start-rate wake-ups run (see `+RateLimits`).
    let rateWakeQueue = DispatchQueue(label: "PersistentOperationQueue.rate")
    /// Where the progress of groups is brought up to date (see `ProgressGroups`).
    let progressQueue = DispatchQueue(label: "PersistentOperationQueue.progress")
    /// Serialises changes to the failed area: moving a finished operation's record there
    /// (until the queue forgets the operation), re-queueing, purging and loading it (which
    /// finishes interrupted moves), so none of them sees another halfway.
    let failedAreaLock = NSLock()
    /// Signalled whenever an operation leaves the queue.
    let finishedCondition = NSCondition()
    /// Serialises changes to the operation graph that must not interleave: an add whose
    /// operation has prerequisites (from resolving them to linking the new entry), the end of
    /// an operation that fails or is cancelled (with its dependents), restoring, and
    /// re-queueing failed records. Taken before `failedAreaLock` and `uniqueKeyLock`.
    let graphLock = NSLock()
    /// How the last launch that used this store ended (see `RecordStore+CrashEvidence`).
    let previousLaunchEnding: PreviousLaunchEnding
    /// Whether the app was active when the last launch ended, as far as it said.
    let previousLaunchWasActive: Bool
    /// What the app last said of its state, and the observation of its lifecycle
    /// notifications (see `+ApplicationState`).
    let lifecycle = Locked(LifecycleState())
    /// This launch's registration with the crash-signal witness.
    let witness: WitnessRegistration?

    /// Opens (creating it if needed, mode 0700) the store at `directory` and takes its lock.
    ///
    /// Register your operation types, then call ``restore()`` to resume what an earlier
    /// run left pending.
    ///
    /// ```swift
    /// let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: uploads)
    /// ```
    ///
    /// - Parameters:
    ///   - directory: The store directory, used by this queue only. A symbolic link to a
    ///     directory is followed: the store is the directory it names.
    ///   - operationQueue: The queue attempts run in. Default: a new `OperationQueue`.
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/locked`` when another
    ///   process (or another open queue in this process) holds the directory, or
    ///   ``PersistenceError/Code/directoryUnavailable`` when it cannot be created, or is a
    ///   file or a symbolic link to something other than a directory (or to nothing).
    public convenience init(directory: URL, operationQueue: OperationQueue = OperationQueue()) throws {
        try self.init(directory: directory, operationQueue: operationQueue, configuration: Configuration())
    }

    /// Opens the store at `directory` with custom settings (see ``init(directory:operationQueue:)``).
    ///
    /// ```swift
    /// let queue = try PersistentOperationQueue(
    ///     directory: storeURL, operationQueue: OperationQueue(),
    ///     configuration: .init(crashLoopLimit: 5))
    /// ```
    ///
    /// - Throws: the errors of ``init(directory:operationQueue:)``, and
    ///   ``PersistenceError/Code/invalidOptions`` when `configuration` cannot be used (a
    ///   ``Configuration/crashLoopLimit`` below 1, a ``Configuration/maximumRecordSize`` too
    ///   small to hold a record, a negative ``Configuration/idempotencyWindow``, a
    ///   ``Configuration/concurrencyLimits`` limit below 1, a ``Configuration/startRateLimits``
    ///   rate that is not positive or a burst below 1, a ``Configuration/fairShareWeights``
    ///   weight outside 1...1,000).
    public init(directory: URL, operationQueue: OperationQueue, configuration: Configuration) throws {
        guard configuration.crashLoopLimit >= 1 else {
            throw PersistenceError(.invalidOptions, "Configuration.crashLoopLimit is \(configuration.crashLoopLimit); it must be at least 1.", fileURL: directory)
        }
        if let (group, weight) = configuration.fairShareWeights.first(where: { !(1...FairShareRounds.maximumWeight).contains($0.value) }) {
            throw PersistenceError(.invalidOptions, "Configuration.fairShareWeights gives the group \"\(group)\" a weight of \(weight); a weight goes from 1 to \(FairShareRounds.maximumWeight).", fileURL: directory)
        }
        if let (tag, limit) = configuration.concurrencyLimits.first(where: { $0.value < 1 }) {
            throw PersistenceError(.invalidOptions, "Configuration.concurrencyLimits gives the tag \"\(tag)\" a limit of \(limit); a limit must be at least 1.", fileURL: directory)
        }
        if let (tag, limit) = configuration.startRateLimits.first(where: { !($0.value.startsPerSecond > 0 && $0.value.startsPerSecond.isFinite) || $0.value.burst < 1 }) {
            throw PersistenceError(.invalidOptions, "Configuration.startRateLimits gives the tag \"\(tag)\" \(limit.startsPerSecond) starts a second with a burst of \(limit.burst); the rate must be a positive finite number and the burst at least 1.", fileURL: directory)
        }
        guard configuration.idempotencyWindow >= 0, configuration.idempotencyWindow.isFinite else {
            throw PersistenceError(.invalidOptions, "Configuration.idempotencyWindow is \(configuration.idempotencyWindow); it must be 0 or more seconds.", fileURL: directory)
        }
        guard configuration.maximumRecordSize > RecordFormat.headerSize else {
            throw PersistenceError(.invalidOptions, "Configuration.maximumRecordSize is \(configuration.maximumRecordSize) bytes, too small to hold a record (more than \(RecordFormat.headerSize) bytes).", fileURL: directory)
        }
        self.directory = directory
        self.operationQueue = operationQueue
        self.configuration = configuration
        let store = try RecordStore(
            directory: directory,
            configuration: RecordStore.Configuration(
                maximumRecordSize: configuration.maximumRecordSize,
                fileSystem: configuration.fileSystem, engine: configuration.storeEngine,
                durability: configuration.durability == .flushed ? .flushed : .processCrash,
                strictRemovals: configuration.strictRemovals, flushDelay: configuration.storeFlushDelay,
                idempotencyWindow: configuration.idempotencyWindow, clock: { [scheduler = configuration.scheduler] in scheduler.now }
            )
        )
        self.store = store
        self.timer = DueTimer(base: configuration.scheduler)
        let launch = try store.beginLaunch(witness: configuration.installsCrashSignalHandlers)
        self.previousLaunchEnding = launch.ending
        self.previousLaunchWasActive = launch.wasActive
        self.witness = launch.descriptor.map { WitnessRegistration(descriptor: $0, store: store) }
        observeApplicationLifecycle(in: NotificationCenter.default, notifications: Self.applicationLifecycleNotifications)
    }

    deinit {
        stopObservingApplicationLifecycle()
        witness?.end()
        for registered in conditionProviders.withLock({ Array($0.values) }) {
            registered.observation.cancel()
        }
        hub.finishStreams()
    }

    // MARK: - Types

    /// Registers an operation type so that ``restore()`` and re-queued failed records can
    /// rebuild it from its ``PersistentOperation/persistenceIdentifier``.
    ///
    /// Register every type before calling ``restore()``; registering the same identifier
    /// again replaces the earlier registration.
    ///
    /// ```swift
    /// queue.register(UploadOperation.self)
    /// queue.register(SyncOperation.self)
    /// ```
    public func register<Op: PersistentOperation>(_ type: Op.Type) {
        register(type) { Op(payload: $0) }
    }

    /// Registers an operation type whose operations this queue builds with `factory`, not
    /// `init(payload:)`, whenever it builds one from a stored payload: after ``restore()``,
    /// for a re-queued failed record, for each period of a periodic operation, and for a
    /// waiting operation your app no longer holds (see ``EnqueueOptions/keepsOperationAlive``).
    ///
    /// Use it to give restored operations what their payload cannot hold — a server client,
    /// a token store, a database — without globals (WorkManager's `WorkerFactory`). The
    /// factory is called on a queue thread, without any of the queue's locks held, and must
    /// return an operation that is not started, not yet added anywhere, and has no
    /// dependencies. Registering the same identifier again replaces the earlier registration.
    ///
    /// ```swift
    /// let api = APIClient(baseURL: serverURL)
    /// queue.register(UploadOperation.self) { payload in
    ///     UploadOperation(payload: payload, client: api)
    /// }
    /// try queue.restore()
    /// ```
    public func register<Op: PersistentOperation>(_ type: Op.Type, factory: @escaping @Sendable (Op.Payload) -> Op) {
        register(type, formerIdentifiers: [], factory: factory)
    }

    /// Registers an operation type whose ``PersistentOperation/persistenceIdentifier``
    /// changed: the records stored under any of `formerIdentifiers` are rebuilt as `type` too
    /// (they keep their identifier on disk; new operations are stored under the current one).
    ///
    /// Better never to change an identifier; this is for the app that did.
    ///
    /// ```swift
    /// // Version 1 stored uploads as "upload"; version 2 as "com.example.upload".
    /// queue.register(UploadOperation.self, formerIdentifiers: ["upload"])
    /// ```
    public func register<Op: PersistentOperation>(_ type: Op.Type, formerIdentifiers: [String]) {
        register(type, formerIdentifiers: formerIdentifiers) { Op(payload: $0) }
    }

    /// Registers an operation type built by `factory` (see ``register(_:factory:)``) whose
    /// records may also carry any of `formerIdentifiers` (see ``register(_:formerIdentifiers:)``).
    public func register<Op: PersistentOperation>(
        _ type: Op.Type, formerIdentifiers: [String], factory: @escaping @Sendable (Op.Payload) -> Op
    ) {
        let registered = RegisteredType(
            makeOperation: { data, version in factory(try Self.decodePayload(of: Op.self, from: data, version: version)) },
            checkPayload: { data, version in _ = try Self.decodePayload(of: Op.self, from: data, version: version) },
            payloadVersion: Op.payloadVersion
        )
        state.withLock { state in
            for identifier in formerIdentifiers + [Op.persistenceIdentifier] { state.registry[identifier] = registered }
        }
    }

    /// A stored payload of `Op`, read as its current payload or, stored with an earlier
    /// payload version, through its migration.
    static func decodePayload<Op: PersistentOperation>(of type: Op.Type, from data: Data, version: Int) throws -> Op.Payload {
        if version == Op.payloadVersion {
            return try RecordFormat.decodePayload(Op.Payload.self, from: data)
        }
        guard version < Op.payloadVersion else {
            throw PersistenceError(
                .unsupportedFormatVersion,
                "The payload was stored with payload version \(version) of \"\(Op.persistenceIdentifier)\"; this build knows versions up to \(Op.payloadVersion)."
            )
        }
        return try Op.migratePayload(StoredPayload(version: version, data: data))
    }

    // MARK: - Adding

    /// Stores `operation` durably, then schedules it.
    ///
    /// When this returns, the record is on disk (appended to the journal and flushed) and
    /// survives a crash or a power cut; concurrent adds share flushes. Nothing runs before
    /// its record is durable.
    ///
    /// **An operation that has to wait is held weakly.** A `RetryingOperation` that does not
    /// start at once — it waits for its not-before date, its run conditions, or room behind a
    /// large backlog — is kept alive by your references only. While you hold it, it is the
    /// object that runs; once nothing does, the queue builds it again from its payload when it
    /// is due, as it builds an operation restored after a relaunch: set up everything in
    /// `init(payload:)`. Operations with a completion block or dependencies, plain
    /// `Operation`s, and those added with ``EnqueueOptions/keepsOperationAlive`` are always held.
    ///
    /// Dependencies work as in an `OperationQueue`: call `addDependency(_:)` before adding,
    /// naming operations already added to this queue. They are saved with the record, and the
    /// operation starts only once each of them has *succeeded* — in this launch or an earlier
    /// one. See <doc:OperationGraphs>.
    ///
    /// ```swift
    /// let first = UploadOperation(payload: upload)
    /// try queue.addOperation(first)
    /// let then = SyncOperation(payload: sync)
    /// then.addDependency(first)
    /// try queue.addOperation(then)               // starts once `first` has succeeded
    /// ```
    ///
    /// - Throws: ``PersistenceError``: ``PersistenceError/Code/unknownType`` when the type
    ///   was not registered, ``PersistenceError/Code/payloadNotEncodable`` /
    ///   ``PersistenceError/Code/payloadDoesNotRoundTrip`` / ``PersistenceError/Code/recordTooLarge``
    ///   when the payload cannot be stored exactly, ``PersistenceError/Code/invalidDependency``
    ///   when a dependency is not an operation of this queue (or is the operation itself),
    ///   ``PersistenceError/Code/prerequisiteFailed`` when one already failed for good or was
    ///   cancelled, ``PersistenceError/Code/operationAlreadyAdded`` when the operation was
    ///   added before or has started (an `OperationQueue` raises an exception there),
    ///   ``PersistenceError/Code/writeFailed`` /
    ///   ``PersistenceError/Code/directoryUnavailable`` when the disk fails. After an error
    ///   nothing was stored and the operation will not run.
    public func addOperation<Op: PersistentOperation>(_ operation: Op) throws {
        _ = try addOperation(operation, options: EnqueueOptions())
    }

    /// Stores `operation` durably with a not-before date, tags or a unique key, then
    /// schedules it. See ``addOperation(_:)``.
    ///
    /// **Unique keys.** When a pending operation already holds ``EnqueueOptions/uniqueKey``,
    /// ``EnqueueOptions/UniqueKeyPolicy/keepExisting`` stores nothing and returns
    /// ``EnqueueResult/Disposition/keptExisting`` with that operation's id;
    /// ``EnqueueOptions/UniqueKeyPolicy/replaceExisting`` stores `operation` durably first,
    /// then cancels the other one (its record is removed, and so are those of the operations
    /// that depend on it). Pending operations include those an earlier launch left in the
    /// store when ``restore()`` has not run yet: the first add with a unique key before then
    /// reads the keys of the stored records once. A kept stored operation runs after
    /// ``restore()``, in its place in run order; a replaced one is reported
    /// ``PersistentOperationEvent/cancelled(_:)`` and never restored.
    ///
    /// **Idempotency keys.** When the queue knows ``EnqueueOptions/idempotencyKey`` (an
    /// operation added with it is stored, or left the store less than
    /// ``Configuration/idempotencyWindow`` ago), nothing is stored and the result is
    /// ``EnqueueResult/Disposition/keptExisting`` with the first operation added with the key,
    /// which may have finished already. The key is checked before the unique key.
    ///
    /// ```swift
    /// let result = try queue.addOperation(
    ///     SyncOperation(payload: sync),
    ///     options: EnqueueOptions(notBefore: tonight, tags: ["sync"], uniqueKey: "nightly-sync"))
    /// if result.disposition == .keptExisting { print("already scheduled as \(result.id)") }
    /// ```
    ///
    /// - Throws: The errors of ``addOperation(_:)``, ``PersistenceError/Code/readFailed``
    ///   when an add with a unique key before ``restore()`` cannot list the stored records, and
    ///   ``PersistenceError/Code/invalidOptions`` for an idempotency key that is empty or longer
    ///   than 1,024 bytes.
    @discardableResult
    public func addOperation<Op: PersistentOperation>(_ operation: Op, options: EnqueueOptions) throws -> EnqueueResult {
        try checkNotAdded(operation)
        let typeIdentifier = Op.persistenceIdentifier
        try checkRegistered(typeIdentifier, of: Op.self)
        try checkConditionsRegistered(options.conditions)
        if let repeating = options.repeating {
            try checkRepeatSchedule(repeating, of: operation)
        }
        try checkLaneOptions(options)
        try checkOpen()
        let payload = try RecordFormat.encodePayload(operation.payload)
        return try withIdempotencyKey(options.idempotencyKey) { ids in
            EnqueueResult(id: PersistentOperationID(record: ids[0]), disposition: .keptExisting)
        } add: {
            try addChecked(operation, payload: payload, options: options)
        }
    }

    /// Stores and schedules `operation`, checked, with its encoded `payload`.
    private func addChecked<Op: PersistentOperation>(_ operation: Op, payload: Data, options: EnqueueOptions) throws -> EnqueueResult {

        // An operation with dependencies is resolved, stored and linked under `graphLock`, so
        // that no prerequisite ends unseen in between; so is an add with a unique key before
        // restore, which looks at the stored records too (see `+StoredKeys`). A replaced
        // operation is cancelled only after that lock is let go (its end takes the lock to
        // settle its own dependents).
        let readsStoredKeys = options.uniqueKey != nil && needsStoredUniqueKeys()
        let readsStoredLanes = options.lane != nil && needsStoredUniqueKeys()
        var replaced: String?
        let result = try withGraphLock(if: !operation.dependencies.isEmpty || readsStoredKeys || readsStoredLanes) { () throws -> EnqueueResult in
            if readsStoredLanes { try loadStoredLanesIfNeeded() }
            let prerequisites = operation.dependencies.isEmpty ? ResolvedPrerequisites() : try resolvePrerequisites(of: operation)
            guard let uniqueKey = options.uniqueKey else {
                let id = try store(operation, payload: payload, options: options, prerequisites: prerequisites)
                return EnqueueResult(id: id, disposition: .added)
            }
            uniqueKeyLock.lock()
            defer { uniqueKeyLock.unlock() }
            let existing = state.withLock { state in
                state.entries.first { !$0.value.isCancelRequested && $0.value.ending == nil && $0.value.record.uniqueKey == uniqueKey }?.key
            }
            if let existing {
                switch options.ifUniqueKeyExists {
                case .keepExisting:
                    return EnqueueResult(id: PersistentOperationID(record: existing), disposition: .keptExisting)
                case .replaceExisting:
                    // The new record is durable before the old one is cancelled: a crash in between
                    // leaves both, and restore keeps only the newer.
                    let id = try store(operation, payload: payload, options: options, prerequisites: prerequisites)
                    state.withLock { $0.entries[existing]?.isCancelRequested = true }
                    replaced = existing
                    return EnqueueResult(id: id, disposition: .replaced(PersistentOperationID(record: existing)))
                }
            }
            // Before restore, the key may be held by a record an earlier launch left pending.
            let stored = readsStoredKeys && needsStoredUniqueKeys() ? try storedRecords(withUniqueKey: uniqueKey) : []
            guard let newest = stored.last else {
                let id = try store(operation, payload: payload, options: options, prerequisites: prerequisites)
                return EnqueueResult(id: id, disposition: .added)
            }
            switch options.ifUniqueKeyExists {
            case .keepExisting:
                // Not an entry yet: it runs after restore().
                return EnqueueResult(id: PersistentOperationID(record: newest), disposition: .keptExisting)
            case .replaceExisting:
                // As above: the new record is durable before the stored one is removed.
                let id = try store(operation, payload: payload, options: options, prerequisites: prerequisites)
                removeReplacedStoredRecords(stored)
                return EnqueueResult(id: id, disposition: .replaced(PersistentOperationID(record: newest)))
            }
        }
        if let replaced { cancel(replaced) }
        return result
    }

    /// Runs `body` holding `graphLock` when `isNeeded`.
    func withGraphLock<T>(if isNeeded: Bool, _ body: () throws -> T) rethrows -> T {
        guard isNeeded else { return try body() }
        graphLock.lock()
        defer { graphLock.unlock() }
        return try body()
    }

    func checkRegistered(_ typeIdentifier: String, of type: Operation.Type) throws {
        guard state.withLock({ $0.registry[typeIdentifier] != nil }) else {
            throw PersistenceError(
                .unknownType,
                "\(type) (\"\(typeIdentifier)\") is not registered; call register(\(type).self) before adding it, so that it can be restored."
            )
        }
    }

    /// Writes the record and starts tracking the operation.
    private func store<Op: PersistentOperation>(
        _ operation: Op, payload: Data, options: EnqueueOptions, prerequisites: ResolvedPrerequisites
    ) throws -> PersistentOperationID {
        let record = makeRecord(
            id: RecordIdentifier.make(), typeIdentifier: Op.persistenceIdentifier, payload: payload, payloadVersion: Op.payloadVersion,
            operation: operation, options: options, prerequisites: prerequisites.ids
        )
        try store.add(record)
        hub.emit(enqueued: [record])
        track([operation], records: [record], liveIDs: [prerequisites.liveIDs], keepsOperationsAlive: options.keepsOperationAlive)
        return PersistentOperationID(record: record.id)
    }

    /// The record of a new operation. Its expiration date is the earlier of the options' and
    /// the operation's own (``RetryingOperation/expirationDate``), so either is saved.
    func makeRecord(
        id: String, typeIdentifier: String, payload: Data, payloadVersion: Int, operation: Operation,
        options: EnqueueOptions, prerequisites: [String], batchID: String? = nil
    ) -> OperationRecord {
        let expirations = [options.expirationDate, (operation as? RetryingOperation)?.expirationDate].compactMap { $0 }
        let now = timer.now
        return OperationRecord(
            id: id,
            typeIdentifier: typeIdentifier,
            payload: payload,
            priority: operation.queuePriority.rawValue,
            enqueueSequence: store.nextEnqueueSequence(),
            enqueuedAt: now,
            notBefore: options.notBefore,
            tags: options.tags.sorted(),
            uniqueKey: options.uniqueKey,
            prerequisites: prerequisites,
            batchID: batchID,
            expiresAt: expirations.min(),
            conditions: options.conditions.sorted(),
            repeatInterval: options.repeating?.interval,
            repeatFlex: options.repeating?.flex ?? 0,
            // The first period targets its not-before date, or now.
            periodTarget: options.repeating.map { _ in options.notBefore ?? now },
            lane: options.lane,
            laneHoldsOnFailure: options.lane != nil && options.holdsLaneOnFailure,
            payloadVersion: payloadVersion,
            idempotencyKey: options.idempotencyKey
        )
    }

    // MARK: - Waiting

    /// Blocks until every operation of the queue has finished and its record has been
    /// removed or moved, including operations waiting for a retry or a not-before date.
    /// A periodic series (``EnqueueOptions/repeating``) counts only while a period is due or
    /// runs: between periods it does not keep this waiting.
    ///
    /// Records of unregistered types never run and are not waited for. From async code,
    /// use ``allOperationsFinished()``.
    ///
    /// ```swift
    /// try queue.addOperation(UploadOperation(payload: upload))
    /// queue.waitUntilAllOperationsAreFinished()
    /// ```
    @available(*, noasync, message: "Use `await allOperationsFinished()` from async code")
    public func waitUntilAllOperationsAreFinished() {
        finishedCondition.lock()
        defer { finishedCondition.unlock() }
        while state.withLock({ !$0.isIdle }) {
            finishedCondition.wait()
        }
    }

    /// Waits, without blocking a thread, until every operation has finished (see
    /// ``waitUntilAllOperationsAreFinished()``).
    ///
    /// - Important: Returns early when the awaiting `Task` is cancelled: the wait ends, the
    ///   operations go on. Check `Task.isCancelled` afterwards when you must know which
    ///   happened; cancel the work itself with ``cancelAllOperations()``.
    ///
    /// ```swift
    /// await queue.allOperationsFinished()
    /// if Task.isCancelled { return }   // the wait was cancelled, not the operations
    /// ```
    public func allOperationsFinished() async {
        await waitUntilEmpty()
    }

    // MARK: - Control

    /// Whether due operations wait instead of starting. Attempts already running go on;
    /// timers keep counting, and what becomes due starts once resumed.
    ///
    /// It is the ``operationQueue``'s `isSuspended`.
    ///
    /// ```swift
    /// queue.isSuspended = !network.isReachable
    /// ```
    public var isSuspended: Bool {
        get { operationQueue.isSuspended }
        set {
            // A shutdown keeps the queue suspended until it closes.
            if !newValue, state.withLock({ $0.isShuttingDown }) { return }
            operationQueue.isSuspended = newValue
        }
    }

    /// Called with every event, in order, on a private serial queue.
    ///
    /// ```swift
    /// queue.eventHandler = { event in logger.debug("\(event)") }
    /// ```
    public var eventHandler: (@Sendable (PersistentOperationEvent) -> Void)? {
        get { hub.handler }
        set { hub.handler = newValue }
    }

    /// Called with every event and what its operation is — its type, tags and lane
    /// (``PersistentOperationEvent/Subject``), read when the event was emitted — in order, on
    /// the same private serial queue as ``eventHandler``. The subject is `nil` for an event of
    /// no operation the queue tracks (a record left on disk, a quarantined entry).
    ///
    /// ```swift
    /// queue.eventHandlerWithSubject = { event, subject in
    ///     if case .succeeded = event, let lane = subject?.lane {
    ///         badge.value = queue.numberOfOperations(inLane: lane)   // this conversation's unsent messages
    ///     }
    /// }
    /// ```
    public var eventHandlerWithSubject: (@Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)? {
        get { hub.subjectHandler }
        set {
            if newValue != nil { hub.setSubjectSource(self) }
            hub.subjectHandler = newValue
        }
    }
}

extension PersistentOperationQueue: EventSubjectSource {
    /// The subject of a tracked operation's event.
    func subject(for event: PersistentOperationEvent) -> PersistentOperationEvent.Subject? {
        guard let id = event.operationID else { return nil }
        let endsAttempt = event.canEndAttempt
        return state.withLock { state in
            state.entries[id.rawValue].map { entry in
                var duration: TimeInterval?
                if endsAttempt, entry.attemptEndedAt != 0, entry.attemptStartedAt != 0, entry.attemptEndedAt >= entry.attemptStartedAt {
                    duration = Double(entry.attemptEndedAt - entry.attemptStartedAt) / 1e9
                }
                return PersistentOperationEvent.Subject(
                    typeIdentifier: entry.record.typeIdentifier, tags: Set(entry.record.tags), lane: entry.record.lane,
                    attempt: entry.record.numberOfAttempts, attemptDuration: duration, enqueuedAt: entry.record.enqueuedAt
                )
            }
        }
    }

    /// Calls `observer` with every event from now on and what its operation is (see
    /// ``eventHandlerWithSubject``), in order, on the events' private serial queue, until the
    /// observation is cancelled. Unlike the handlers, any number of observers can be added:
    /// a metrics or logging integration observes the queue without taking the app's handler.
    ///
    /// ```swift
    /// let observation = queue.addEventObserver { event, subject in
    ///     if case .failed = event, let subject {
    ///         print("\(subject.typeIdentifier) failed for good after \(subject.attempt) attempts")
    ///     }
    /// }
    /// // …
    /// observation.cancel()
    /// ```
    ///
    /// - Returns: The observation; it lasts until ``EventObservation/cancel()`` (or the
    ///   queue's end), whether or not it is kept.
    @discardableResult
    public func addEventObserver(
        _ observer: @escaping @Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void
    ) -> EventObservation {
        hub.setSubjectSource(self)
        let key = hub.addObserver(observer)
        return EventObservation { [weak hub] in hub?.removeObserver(key) }
    }

    /// An observer added by ``addEventObserver(_:)``.
    public final class EventObservation: Sendable {
        private let remove: Locked<(@Sendable () -> Void)?>

        init(remove: @escaping @Sendable () -> Void) {
            self.remove = Locked(remove)
        }

        /// Stops the observer: events delivered from then on do not reach it (the ones being
        /// delivered at that moment, on the events' queue, still may). Calling it again does
        /// nothing.
        public func cancel() {
            let remove = self.remove.withLock { remove in
                defer { remove = nil }
                return remove
            }
            remove?()
        }
    }

    /// A new stream of every event from now on, in order. Subscribe before ``restore()`` to
    /// see its events. The stream ends when the queue is deallocated.
    ///
    /// ```swift
    /// Task { for await event in queue.events { print(event) } }
    /// ```
    public var events: AsyncStream<PersistentOperationEvent> {
        hub.makeStream()
    }

    /// Stops starting operations and releases the store directory's lock, so another
    /// queue may open it. Attempts already running go on, but their outcome is no longer
    /// saved: their records stay pending and run again after the next ``restore()``.
    ///
    /// A store write already under way (an add, a retry's update, a removal) is finished
    /// first: `close()` returns, and the lock is released, only after it, so nothing this
    /// queue writes lands in a store another queue or process has taken over. An add on
    /// another thread that starts after `close()` throws ``PersistenceError/Code/storeNotWritable``.
    ///
    /// ```swift
    /// queue.close()
    /// ```
    public func close() {
        state.withLock { $0.isClosed = true }
        stopTakingRequests()
        endRunsForClose()
        // The run conditions stop calling a queue that no longer starts anything.
        let observations = conditionProviders.withLock { providers in providers.values.map(\.observation) }
        for observation in observations { observation.cancel() }
        stopObservingApplicationLifecycle()
        witness?.end()
        store.close()
        hub.flush()
    }

    func checkOpen() throws {
        if state.withLock({ $0.isClosed }) {
            throw PersistenceError(.storeNotWritable, "The queue has been closed.", fileURL: directory)
        }
    }

    /// Hands a message to the configured log handler on the events' serial queue, in order
    /// with the events: the handler is user code, and the queue may hold one of its locks here.
    func log(_ level: RetryLogHandler.Level, _ text: @autoclosure () -> String, metadata: () -> [String: String] = { [:] }) {
        guard let handler = configuration.logHandler, level >= handler.minimumLevel else { return }
        let message = RetryLogHandler.Message(level: level, text: text(), operationDescription: "PersistentOperationQueue", metadata: metadata())
        hub.deliver { handler.handle(message) }
    }
}
