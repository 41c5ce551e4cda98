import Foundation

/// One record of a store directory as read from disk by a ``ReadOnlyPersistentStore``,
/// without a live operation.
///
/// ```swift
/// let store = try ReadOnlyPersistentStore(directory: storeURL)
/// for record in try store.pendingRecords().records {
///     print(record.id, record.typeIdentifier, record.state.map { "\($0)" } ?? "-", "attempts:", record.numberOfAttempts)
/// }
/// ```
public struct StoredOperationRecord: Sendable, Hashable {
    /// The area of the store a record sits in.
    public enum Area: String, Sendable, Hashable {
        /// Not finished: it runs (again) when a queue restores the store.
        case pending
        /// The failed (dead-letter) area.
        case failed
    }

    /// The record's identifier, the one a ``PersistentOperationQueue`` reports.
    public var id: PersistentOperationID
    /// Where the record sits.
    public var area: Area
    /// The type's ``PersistentOperation/persistenceIdentifier``.
    public var typeIdentifier: String
    /// For a pending record, where its operation is in its life as far as the files tell,
    /// the same states ``PersistentOperationInfo/state`` reports:
    /// ``PersistentOperationInfo/State/running`` while an attempt has started and not ended
    /// (see ``attemptsInFlight``) and a running process holds the store — in a store no
    /// process holds, such an attempt was interrupted and the record is due again —,
    /// ``PersistentOperationInfo/State/waitingForPrerequisites`` while one of its
    /// ``prerequisites`` is pending, ``PersistentOperationInfo/State/waitingForLane`` while a
    /// record added before it to its ``lane`` is pending (as
    /// ``ReadOnlyPersistentStore/pendingRecords()`` and its pages,
    /// ``ReadOnlyPersistentStore/pendingRecords(after:limit:)``, list them),
    /// ``PersistentOperationInfo/State/waitingToRetry`` until a
    /// future ``nextAttemptAt``, ``PersistentOperationInfo/State/scheduled`` until a future
    /// ``notBefore``, otherwise ``PersistentOperationInfo/State/queued`` (due). `nil` for a
    /// failed record.
    public var state: PersistentOperationInfo.State?
    /// The saved priority: the raw value of the operation's `queuePriority` (as stored, so
    /// a value no `Operation.QueuePriority` case has is shown as it is).
    public var priority: Int
    /// When the operation was first added.
    public var enqueuedAt: Date
    /// The not-before date it was added with; for a periodic operation, the start of its
    /// current period's window.
    public var notBefore: Date?
    /// No attempt starts at or after this date (``EnqueueOptions/expirationDate``).
    public var expirationDate: Date? = nil
    /// The run conditions that must all hold before an attempt starts
    /// (``EnqueueOptions/conditions``), sorted. A read-only view cannot tell whether they hold:
    /// ``state`` says what the record's dates say.
    public var conditions: [String] = []
    /// When the next attempt is due, after a retry was scheduled.
    public var nextAttemptAt: Date?
    /// When the record may next start: the later of ``notBefore`` and ``nextAttemptAt``, or
    /// `nil` when it is due now. Only the dates count: a read-only view cannot tell whether a
    /// prerequisite is pending (see ``state``) or a run condition holds. For a failed record,
    /// when it could start once re-queued.
    public var dueDate: Date? = nil
    /// How a periodic operation repeats (``EnqueueOptions/repeating``), or `nil` for an
    /// operation that runs once.
    public var repeating: RepeatSchedule? = nil
    /// For a periodic operation, the target of its current period: the period may start from
    /// `repeating.flex` seconds before it (its ``notBefore``), and the next period targets a
    /// whole number of intervals later. `nil` for an operation that runs once.
    public var periodTarget: Date? = nil
    /// For a periodic operation, the periods that have ended, succeeded or failed for good;
    /// 0 for an operation that runs once.
    public var completedPeriods: Int = 0
    /// The ordered lane it runs in (``EnqueueOptions/lane``), if any. Within a lane, records
    /// run in ``enqueueSequence`` order.
    public var lane: String? = nil
    /// Whether a failure for good, as its lane's current operation, holds the lane
    /// (``EnqueueOptions/holdsLaneOnFailure``).
    public var holdsLaneOnFailure = false
    /// For a failed record: it holds its lane, whose other records wait until it is
    /// re-queued or purged.
    public var isHoldingLane = false
    /// The ``PersistentOperation/payloadVersion`` its payload was stored with.
    public var payloadVersion = 1
    /// The tags it was added with.
    public var tags: Set<String>
    /// The unique key it was added with.
    public var uniqueKey: String?
    /// The idempotency key it (or its batch) was added with (``EnqueueOptions/idempotencyKey``).
    public var idempotencyKey: String?
    /// Counted retries saved so far.
    public var numberOfRetries: Int
    /// Attempts started so far, across launches, including those in flight — the number
    /// ``PersistentOperationInfo/numberOfAttempts`` reports.
    public var numberOfAttempts: Int
    /// Attempts that started and have not ended: running now when an app holds the store,
    /// otherwise interrupted by the end of the process (they run again, as retries, after the
    /// next restore). Crash-loop protection counts them.
    public var attemptsInFlight: Int
    /// Crashes of the process attributed to this pending operation by crash-loop protection:
    /// launches that crashed while its attempt was the only one in flight, since its last
    /// attempt that ended. At ``PersistentOperationQueue/Configuration/crashLoopLimit`` it is
    /// moved to the failed area, with the count in ``failureReason``.
    public var crashes: Int = 0
    /// Kills of the process attributed to this pending operation by crash-loop protection:
    /// launches killed in a row while its attempt ran alone and the app was active
    /// (``PersistentOperationQueue/applicationState``), since its last attempt that ended. At
    /// ``PersistentOperationQueue/Configuration/crashLoopLimit`` it is moved to the failed
    /// area, with the count in ``failureReason``.
    ///
    /// ```swift
    /// let store = try ReadOnlyPersistentStore(directory: storeURL)
    /// for record in try store.pendingRecords().records where record.kills > 0 {
    ///     print(record.id, "was running alone when the app was killed \(record.kills) times in a row")
    /// }
    /// ```
    public var kills: Int = 0
    /// Whether its next attempt runs alone: it was in flight when a launch crashed (then it
    /// runs before other work), or was killed while the app was active (then it runs once no
    /// other work is due; see ``RestoreReport/runAlone``).
    public var runsAlone: Bool = false
    /// The error of the last failed attempt, as text.
    public var lastErrorDescription: String?
    /// Why a failed record failed.
    public var failureReason: String?
    /// The record format version of the file.
    public var formatVersion: Int
    /// The order of the add among all adds to the store; with ``priority``, the run order.
    public var enqueueSequence: UInt64
    /// The operations that must succeed before this one starts (see <doc:OperationGraphs>).
    public var prerequisites: [PersistentOperationID] = []
    /// The pending records that wait for this one (filled in for pending records).
    public var dependents: [PersistentOperationID] = []
    /// For a failed record, the prerequisite whose failure failed it.
    public var failedPrerequisite: PersistentOperationID?
    /// The payload as stored: a binary property list holding the encoded payload. Decode it
    /// with ``decodePayload(as:)``, which verifies it first.
    public var payload: Data

    /// The payload decoded as `type`'s payload, after verifying its bytes (no unverified byte
    /// reaches a decoder).
    ///
    /// ```swift
    /// let upload = try record.decodePayload(as: UploadOperation.self)
    /// print(upload.file)
    /// ```
    ///
    /// - Throws: ``PersistenceError/Code/corruptRecord`` when the bytes fail verification or
    ///   do not decode as `type`'s payload.
    public func decodePayload<Op: PersistentOperation>(as type: Op.Type) throws -> Op.Payload {
        try RecordFormat.decodePayload(Op.Payload.self, from: payload)
    }
}

extension StoredOperationRecord {
    /// A record as read from `area`, with what its attempt marker or suspect file says
    /// (`evidence`, see `RecordStore.attemptEvidence()`). `isStoreHeld`: whether a running
    /// process holds the store, so that an attempt in flight is running rather than interrupted.
    init(_ record: OperationRecord, area: Area, isStoreHeld: Bool, now: Date, evidence: CrashSuspect? = nil) {
        // The record counts attempts up to its last save; the marker or suspect file (or, for a
        // record moved aside by crash-loop protection, the record itself) counts those started since.
        let inFlight = max(record.attemptsInFlight, evidence?.interruptedAttempts ?? 0)
        let state: PersistentOperationInfo.State?
        switch area {
        case .failed: state = nil
        case .pending:
            if inFlight > 0 && isStoreHeld {
                state = .running
            } else if let next = record.nextAttemptAt, next > now {
                state = .waitingToRetry
            } else if let notBefore = record.notBefore, notBefore > now {
                state = .scheduled
            } else {
                state = .queued
            }
        }
        self.init(
            id: PersistentOperationID(record: record.id),
            area: area,
            typeIdentifier: record.typeIdentifier,
            state: state,
            priority: record.priority,
            enqueuedAt: record.enqueuedAt,
            notBefore: record.notBefore,
            nextAttemptAt: record.nextAttemptAt,
            tags: Set(record.tags),
            uniqueKey: record.uniqueKey,
            numberOfRetries: record.numberOfRetries,
            numberOfAttempts: record.numberOfAttempts + inFlight,
            attemptsInFlight: inFlight,
            lastErrorDescription: record.lastErrorDescription,
            failureReason: record.failureReason,
            formatVersion: record.formatVersion,
            enqueueSequence: record.enqueueSequence,
            prerequisites: record.prerequisites.map(PersistentOperationID.init(record:)),
            failedPrerequisite: record.failedPrerequisite.map(PersistentOperationID.init(record:)),
            payload: record.payload
        )
        expirationDate = record.expiresAt
        conditions = record.conditions
        dueDate = record.dueDate
        repeating = record.repeatInterval.map { RepeatSchedule(interval: $0, flex: record.repeatFlex) }
        periodTarget = record.periodTarget
        completedPeriods = record.completedPeriods
        lane = record.lane
        holdsLaneOnFailure = record.laneHoldsOnFailure
        isHoldingLane = record.isHoldingLane
        payloadVersion = record.payloadVersion
        idempotencyKey = record.idempotencyKey
        if let evidence {
            crashes = evidence.crashes
            kills = evidence.kills
            runsAlone = evidence.runsAlone
        }
    }

    /// Marks the pending records of a lane that come after its first (in enqueue order) as
    /// waiting for their turn (a running one excepted: its attempt was in flight).
    static func linkingLanes(of records: [StoredOperationRecord]) -> [StoredOperationRecord] {
        guard records.contains(where: { $0.lane != nil }) else { return records }
        var first: [String: UInt64] = [:]
        for record in records {
            if let lane = record.lane { first[lane] = min(first[lane] ?? .max, record.enqueueSequence) }
        }
        return records.map { record in
            var record = record
            if let lane = record.lane, record.state != .running, first[lane] != record.enqueueSequence {
                record.state = .waitingForLane
            }
            return record
        }
    }

    /// Marks pending records waiting for a pending prerequisite, and lists each record's
    /// pending dependents.
    static func linkingGraph(of records: [StoredOperationRecord]) -> [StoredOperationRecord] {
        let records = linkingLanes(of: records)
        guard records.contains(where: { !$0.prerequisites.isEmpty }) else { return records }
        let pending = Set(records.map(\.id))
        var dependents: [PersistentOperationID: [PersistentOperationID]] = [:]
        for record in records {
            for prerequisite in record.prerequisites where pending.contains(prerequisite) {
                dependents[prerequisite, default: []].append(record.id)
            }
        }
        return records.map { record in
            var record = record
            record.dependents = dependents[record.id] ?? []
            if record.state != .running, record.prerequisites.contains(where: pending.contains) {
                record.state = .waitingForPrerequisites
            }
            return record
        }
    }
}
