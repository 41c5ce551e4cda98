import Foundation

/// The on-disk envelope of one pending operation: its payload and everything the queue needs
/// to schedule, retry and report it.
///
/// One record is stored per file, named `<id>.record`, in the store's `pending/` area (or
/// `failed/` once it failed for good). The file format is described in ``RecordFormat``.
///
/// ## Format version 1
///
/// Every field below is stored under a dictionary key of the same name. Optional fields are
/// absent from the file when `nil`. Readers of version 1 ignore keys they do not know, so
/// fields can be added without a new version as long as older readers may safely ignore them.
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `formatVersion` | integer | Always 1. |
/// | `id` | string | Library-generated UUID; the only source of the file name. |
/// | `typeIdentifier` | string | `PersistentOperation.persistenceIdentifier` of the type. |
/// | `payload` | data | The encoded payload, a verified binary property list. |
/// | `priority` | integer | Higher runs first. |
/// | `enqueueSequence` | integer | Increases with every add to the store; FIFO within a priority. |
/// | `enqueuedAt` | date | When the operation was first added. |
/// | `notBefore` | date? | The operation does not start before this date. |
/// | `tags` | array of strings | Free-form labels for queries and cancellation. |
/// | `uniqueKey` | string? | A caller-chosen identifier for unique work. |
/// | `numberOfRetries` | integer | Counted retries so far (uncounted waits excluded). |
/// | `numberOfAttempts` | integer | Attempts started so far, counted or not. |
/// | `nextAttemptAt` | date? | When the next attempt is due, while waiting to retry. |
/// | `attemptsInFlight` | integer | Consecutive launches in which an attempt started and never ended. |
/// | `lastErrorDescription` | string? | Description of the error that ended the last attempt. |
/// | `failureReason` | string? | Why the record was moved to the failed area. |
///
/// ## Format version 2
///
/// Version 2 adds the operation graph. Its keys are those of version 1 and:
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `prerequisites` | array of strings? | Identifiers of the records that must succeed before this one starts. |
/// | `batchID` | string? | The `addOperations` batch the record was stored with; it counts only once the batch's commit marker exists. |
/// | `failedPrerequisite` | string? | In the failed area: the prerequisite whose failure failed this record. |
///
/// A record is written in the lowest version that holds it: version 1 unless one of these
/// fields is set, so that a reader of version 1 (which would ignore them, and run a dependent
/// too early) never sees a record that needs them.
///
/// ## Format version 3
///
/// Version 3 adds deadlines and run conditions. Its keys are those of version 2 and:
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `expiresAt` | date? | No attempt starts at or after this date; the record then fails as expired. |
/// | `conditions` | array of strings? | Names of the run conditions that must all hold before an attempt starts. |
///
/// A record with an expiration date or conditions is written in version 3, so that an older
/// reader (which would run it after it expired, or while a condition is unmet) leaves it alone
/// as a newer format.
///
/// ## Format version 4
///
/// Version 4 adds periodic operations. Its keys are those of version 3 and:
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `repeatInterval` | real? | Seconds between the targets of consecutive periods; set for a periodic operation only. |
/// | `repeatFlex` | real? | Seconds before each period's target from which that period may start (0 when absent). |
/// | `periodTarget` | date? | The target of the current period; the next one is a whole number of intervals later. |
/// | `completedPeriods` | integer? | Periods that have ended, succeeded or failed (0 when absent). |
///
/// While a period waits, `notBefore` is its window's start (`periodTarget - repeatFlex`). A
/// periodic record is written in version 4, so that an older reader (which would remove it
/// after one run) leaves it alone as a newer format.
///
/// ## Format version 5
///
/// Version 5 is the journal's. Its keys are those of version 4, but `priority`, `tags`,
/// `numberOfRetries`, `numberOfAttempts` and `attemptsInFlight` are left out when they hold
/// their default value (0, or no tags), which is what most pending records hold: about 90
/// bytes less per record. The journal writes every record in version 5 (no earlier version
/// reads a journal). Record files of the one-file-per-record layout, and records exported
/// by `store-inspector export`, are still written in the lowest of versions 1 to 4 that
/// holds them (``requiredFormatVersion``).
///
/// ## Format version 6
///
/// Version 6 adds ordered lanes. Its keys are those of version 5 and:
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `lane` | string? | The ordered lane the operation runs in: one at a time, in `enqueueSequence` order. |
/// | `laneHoldsOnFailure` | boolean? | When it fails for good as its lane's current operation, the lane waits for it (absent: `false`). |
/// | `isHoldingLane` | boolean? | In the failed area: the record holds its lane until it is re-queued or purged (absent: `false`). |
///
/// Only a record in a lane is written in version 6 (``journalFormatVersion``), so that an older
/// reader (which would run it out of order) leaves it alone as a newer format; every other
/// record is still written in version 5.
///
/// ## The payload version (any format version)
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `payloadVersion` | integer? | The `PersistentOperation.payloadVersion` the payload was stored with (absent: 1). |
///
/// A reader that does not know the key reads the payload as its own type's, as before the key
/// existed: a payload that changed incompatibly does not decode and is quarantined there.
///
/// ## The idempotency key (any format version)
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `idempotencyKey` | string? | The `EnqueueOptions.idempotencyKey` the operation or its batch was added with. |
///
/// A reader that does not know the key runs the record as any other; only a repeated add
/// needs it.
///
/// ## The progress (any format version)
///
/// | Key | Type | Meaning |
/// |---|---|---|
/// | `progressCompleted` | integer? | The units of work the operation had reported done when its record was last saved. |
/// | `progressTotal` | integer? | The units of the whole work then (negative: not known). |
///
/// Both or neither. A reader that does not know them starts the restored operation's progress
/// from nothing, as before the keys existed.
package struct OperationRecord: Codable, Sendable, Equatable {
    /// The newest record format version this library writes (in the journal) and reads.
    package static let currentFormatVersion = 6
    /// The format versions this library reads.
    package static let readableFormatVersions = 1...currentFormatVersion

    // The fields most records leave at their defaults (tags, unique key, error texts, graph,
    // deadline, conditions, period) live in `extras`, a copy-on-write box that is `nil` while
    // they all do: a record takes about 150 bytes inline instead of 300, and the queue keeps
    // one for every operation it tracks.

    /// The format version the record was read with (a new record: the one it needs now).
    /// ``RecordFormat/encode(_:maximumSize:formatVersion:)`` writes ``requiredFormatVersion`` whatever this says.
    package var formatVersion = 1
    /// The library-generated identifier (an uppercase UUID string); file names come only from it.
    package var id: String
    /// The stable type name, `PersistentOperation.persistenceIdentifier`, used to rebuild the operation.
    package var typeIdentifier: String
    /// The payload encoded by ``RecordFormat/encodePayload(_:)``.
    package var payload: Data
    /// The scheduling priority: higher values run first.
    package var priority: Int
    /// A per-store number that increases with every add, giving FIFO order within a priority.
    package var enqueueSequence: UInt64
    /// When the operation was first added.
    package var enqueuedAt: Date
    /// The operation does not start before this date, when set.
    package var notBefore: Date?
    /// Retries counted against the retry budget so far.
    package var numberOfRetries: Int
    /// Attempts started so far, including attempts after uncounted waits.
    package var numberOfAttempts: Int
    /// When the next attempt is due, while the operation waits to retry.
    package var nextAttemptAt: Date?
    /// Consecutive launches during which an attempt started and was never recorded as ended;
    /// the crash-loop protection moves the record to the failed area when it reaches its limit.
    package var attemptsInFlight: Int
    private var extras: Extras?

    /// Free-form labels used to query and cancel operations.
    package var tags: [String] {
        get { extras?.tags ?? [] }
        set { extras.changeField(to: newValue, isDefault: newValue.isEmpty) { $0.tags = $1 } }
    }
    /// A caller-chosen identifier for unique work, when set.
    package var uniqueKey: String? {
        get { extras?.uniqueKey }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.uniqueKey = $1 } }
    }
    /// The description of the error that ended the last attempt, when there was one.
    package var lastErrorDescription: String? {
        get { extras?.lastErrorDescription }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.lastErrorDescription = $1 } }
    }
    /// Why the record is in the failed area; `nil` for pending records.
    package var failureReason: String? {
        get { extras?.failureReason }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.failureReason = $1 } }
    }
    /// The records that must succeed before this one starts (version 2).
    package var prerequisites: [String] {
        get { extras?.prerequisites ?? [] }
        set { extras.changeField(to: newValue, isDefault: newValue.isEmpty) { $0.prerequisites = $1 } }
    }
    /// The `addOperations` batch this record was stored with, while its commit marker
    /// decides whether it counts (version 2).
    package var batchID: String? {
        get { extras?.batchID }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.batchID = $1 } }
    }
    /// In the failed area: the prerequisite whose failure failed this record (version 2).
    package var failedPrerequisite: String? {
        get { extras?.failedPrerequisite }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.failedPrerequisite = $1 } }
    }
    /// No attempt starts at or after this date (version 3).
    package var expiresAt: Date? {
        get { extras?.expiresAt }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.expiresAt = $1 } }
    }
    /// The run conditions that must all hold before an attempt starts, sorted (version 3).
    package var conditions: [String] {
        get { extras?.conditions ?? [] }
        set { extras.changeField(to: newValue, isDefault: newValue.isEmpty) { $0.conditions = $1 } }
    }
    /// Seconds between consecutive periods' targets; `nil` unless the operation is periodic (version 4).
    package var repeatInterval: Double? {
        get { extras?.repeatInterval }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.repeatInterval = $1 } }
    }
    /// Seconds before a period's target from which it may start (version 4).
    package var repeatFlex: Double {
        get { extras?.repeatFlex ?? 0 }
        set { extras.changeField(to: newValue, isDefault: newValue == 0 && newValue.sign == .plus) { $0.repeatFlex = $1 } }
    }
    /// The target of the current period of a periodic operation (version 4).
    package var periodTarget: Date? {
        get { extras?.periodTarget }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.periodTarget = $1 } }
    }
    /// Periods of a periodic operation that have ended (version 4).
    package var completedPeriods: Int {
        get { extras?.completedPeriods ?? 0 }
        set { extras.changeField(to: newValue, isDefault: newValue == 0) { $0.completedPeriods = $1 } }
    }

    /// The ordered lane the operation runs in, when it has one (version 6).
    package var lane: String? {
        get { extras?.lane }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.lane = $1 } }
    }
    /// Whether a failure for good, while the operation is its lane's current one, holds the
    /// lane (version 6).
    package var laneHoldsOnFailure: Bool {
        get { extras?.laneHoldsOnFailure ?? false }
        set { extras.changeField(to: newValue, isDefault: !newValue) { $0.laneHoldsOnFailure = $1 } }
    }
    /// In the failed area: the record holds its lane until it is re-queued or purged (version 6).
    package var isHoldingLane: Bool {
        get { extras?.isHoldingLane ?? false }
        set { extras.changeField(to: newValue, isDefault: !newValue) { $0.isHoldingLane = $1 } }
    }
    /// The ``PersistentOperation/payloadVersion`` of the type that stored the payload (any
    /// record format version; absent: 1).
    package var payloadVersion: Int {
        get { extras?.payloadVersion ?? 1 }
        set { extras.changeField(to: newValue, isDefault: newValue == 1) { $0.payloadVersion = $1 } }
    }
    /// The idempotency key the operation (or its batch) was added with (any record format
    /// version): a repeated add with the key finds this record while it is stored, and its
    /// removal remembers the key for a while (`JournalStore`'s retire frames).
    package var idempotencyKey: String? {
        get { extras?.idempotencyKey }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.idempotencyKey = $1 } }
    }
    /// The units of work the operation had reported when its record was last saved (any
    /// record format version): its restored operation's progress starts there.
    package var progressUnits: ProgressUnits? {
        get { extras?.progressUnits }
        set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.progressUnits = $1 } }
    }

    /// Units of work done, of a whole (``OperationRecord/progressUnits``).
    package struct ProgressUnits: Sendable, Hashable {
        package var completed: Int64
        /// Negative: not known.
        package var total: Int64

        package init(completed: Int64, total: Int64) {
            self.completed = completed
            self.total = total
        }
    }

    /// The fields most records leave at their defaults. Shared by copies of a record until one
    /// of them changes a field (copy on write); never changed while shared, hence `Sendable`.
    private final class Extras: CopyOnWriteFields, @unchecked Sendable {
        var tags: [String] = []
        var uniqueKey: String?
        var lastErrorDescription: String?
        var failureReason: String?
        var prerequisites: [String] = []
        var batchID: String?
        var failedPrerequisite: String?
        var expiresAt: Date?
        var conditions: [String] = []
        var repeatInterval: Double?
        var repeatFlex: Double = 0
        var periodTarget: Date?
        var completedPeriods = 0
        var lane: String?
        var laneHoldsOnFailure = false
        var isHoldingLane = false
        var payloadVersion = 1
        var idempotencyKey: String?
        var progressUnits: ProgressUnits?

        /// Whether every field has its default value (a `-0` flex is not the default: it
        /// must read back as it was set).
        var isDefault: Bool {
            tags.isEmpty && uniqueKey == nil && lastErrorDescription == nil && failureReason == nil
                && prerequisites.isEmpty && batchID == nil && failedPrerequisite == nil && expiresAt == nil
                && conditions.isEmpty && repeatInterval == nil && repeatFlex == 0 && repeatFlex.sign == .plus
                && periodTarget == nil && completedPeriods == 0 && lane == nil && !laneHoldsOnFailure && !isHoldingLane && payloadVersion == 1
                && idempotencyKey == nil && progressUnits == nil
        }

        func copy() -> Extras {
            let copy = Extras()
            copy.tags = tags
            copy.uniqueKey = uniqueKey
            copy.lastErrorDescription = lastErrorDescription
            copy.failureReason = failureReason
            copy.prerequisites = prerequisites
            copy.batchID = batchID
            copy.failedPrerequisite = failedPrerequisite
            copy.expiresAt = expiresAt
            copy.conditions = conditions
            copy.repeatInterval = repeatInterval
            copy.repeatFlex = repeatFlex
            copy.periodTarget = periodTarget
            copy.completedPeriods = completedPeriods
            copy.lane = lane
            copy.laneHoldsOnFailure = laneHoldsOnFailure
            copy.isHoldingLane = isHoldingLane
            copy.payloadVersion = payloadVersion
            copy.idempotencyKey = idempotencyKey
            copy.progressUnits = progressUnits
            return copy
        }
    }

    /// Creates a record of format ``currentFormatVersion`` with a fresh identifier.
    package init(
        id: String = RecordIdentifier.make(),
        typeIdentifier: String,
        payload: Data,
        priority: Int = 0,
        enqueueSequence: UInt64,
        enqueuedAt: Date = Date(),
        notBefore: Date? = nil,
        tags: [String] = [],
        uniqueKey: String? = nil,
        numberOfRetries: Int = 0,
        numberOfAttempts: Int = 0,
        nextAttemptAt: Date? = nil,
        attemptsInFlight: Int = 0,
        lastErrorDescription: String? = nil,
        failureReason: String? = nil,
        prerequisites: [String] = [],
        batchID: String? = nil,
        failedPrerequisite: String? = nil,
        expiresAt: Date? = nil,
        conditions: [String] = [],
        repeatInterval: Double? = nil,
        repeatFlex: Double = 0,
        periodTarget: Date? = nil,
        completedPeriods: Int = 0,
        lane: String? = nil,
        laneHoldsOnFailure: Bool = false,
        isHoldingLane: Bool = false,
        payloadVersion: Int = 1,
        idempotencyKey: String? = nil,
        progressUnits: ProgressUnits? = nil
    ) {
        self.init(
            formatVersion: 1, id: id, typeIdentifier: typeIdentifier, payload: payload, priority: priority, enqueueSequence: enqueueSequence,
            enqueuedAt: enqueuedAt, notBefore: notBefore, numberOfRetries: numberOfRetries, numberOfAttempts: numberOfAttempts,
            nextAttemptAt: nextAttemptAt, attemptsInFlight: attemptsInFlight, extras: nil
        )
        self.tags = tags
        self.uniqueKey = uniqueKey
        self.lastErrorDescription = lastErrorDescription
        self.failureReason = failureReason
        self.prerequisites = prerequisites
        self.batchID = batchID
        self.failedPrerequisite = failedPrerequisite
        self.expiresAt = expiresAt
        self.conditions = conditions
        self.repeatInterval = repeatInterval
        self.repeatFlex = repeatFlex
        self.periodTarget = periodTarget
        self.completedPeriods = completedPeriods
        self.lane = lane
        self.laneHoldsOnFailure = laneHoldsOnFailure
        self.isHoldingLane = isHoldingLane
        self.payloadVersion = payloadVersion
        self.idempotencyKey = idempotencyKey
        self.progressUnits = progressUnits
        self.formatVersion = requiredFormatVersion
    }

    private enum CodingKeys: String, CodingKey {
        case formatVersion, id, typeIdentifier, payload, priority, enqueueSequence, enqueuedAt, notBefore, tags
        case uniqueKey, numberOfRetries, numberOfAttempts, nextAttemptAt, attemptsInFlight, lastErrorDescription
        case failureReason, prerequisites, batchID, failedPrerequisite, expiresAt, conditions
        case repeatInterval, repeatFlex, periodTarget, completedPeriods
        case lane, laneHoldsOnFailure, isHoldingLane, payloadVersion, idempotencyKey
        case progressCompleted, progressTotal
    }

    /// Decodes a record body with any `Decoder` (Foundation's property-list decoder reads one);
    /// the version 2 keys may be absent, as they are from every version 1 body.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            id: try container.decode(String.self, forKey: .id),
            typeIdentifier: try container.decode(String.self, forKey: .typeIdentifier),
            payload: try container.decode(Data.self, forKey: .payload),
            priority: try container.decode(Int.self, forKey: .priority),
            enqueueSequence: try container.decode(UInt64.self, forKey: .enqueueSequence),
            enqueuedAt: try container.decode(Date.self, forKey: .enqueuedAt),
            notBefore: try container.decodeIfPresent(Date.self, forKey: .notBefore),
            tags: try container.decode([String].self, forKey: .tags),
            uniqueKey: try container.decodeIfPresent(String.self, forKey: .uniqueKey),
            numberOfRetries: try container.decode(Int.self, forKey: .numberOfRetries),
            numberOfAttempts: try container.decode(Int.self, forKey: .numberOfAttempts),
            nextAttemptAt: try container.decodeIfPresent(Date.self, forKey: .nextAttemptAt),
            attemptsInFlight: try container.decode(Int.self, forKey: .attemptsInFlight),
            lastErrorDescription: try container.decodeIfPresent(String.self, forKey: .lastErrorDescription),
            failureReason: try container.decodeIfPresent(String.self, forKey: .failureReason),
            prerequisites: try container.decodeIfPresent([String].self, forKey: .prerequisites) ?? [],
            batchID: try container.decodeIfPresent(String.self, forKey: .batchID),
            failedPrerequisite: try container.decodeIfPresent(String.self, forKey: .failedPrerequisite),
            expiresAt: try container.decodeIfPresent(Date.self, forKey: .expiresAt),
            conditions: try container.decodeIfPresent([String].self, forKey: .conditions) ?? [],
            repeatInterval: try container.decodeIfPresent(Double.self, forKey: .repeatInterval),
            repeatFlex: try container.decodeIfPresent(Double.self, forKey: .repeatFlex) ?? 0,
            periodTarget: try container.decodeIfPresent(Date.self, forKey: .periodTarget),
            completedPeriods: try container.decodeIfPresent(Int.self, forKey: .completedPeriods) ?? 0,
            lane: try container.decodeIfPresent(String.self, forKey: .lane),
            laneHoldsOnFailure: try container.decodeIfPresent(Bool.self, forKey: .laneHoldsOnFailure) ?? false,
            isHoldingLane: try container.decodeIfPresent(Bool.self, forKey: .isHoldingLane) ?? false,
            payloadVersion: try container.decodeIfPresent(Int.self, forKey: .payloadVersion) ?? 1,
            idempotencyKey: try container.decodeIfPresent(String.self, forKey: .idempotencyKey),
            progressUnits: try container.decodeIfPresent(Int64.self, forKey: .progressCompleted).flatMap { completed in
                try container.decodeIfPresent(Int64.self, forKey: .progressTotal).map { ProgressUnits(completed: completed, total: $0) }
            }
        )
        formatVersion = try container.decode(Int.self, forKey: .formatVersion)
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(formatVersion, forKey: .formatVersion)
        try container.encode(id, forKey: .id)
        try container.encode(typeIdentifier, forKey: .typeIdentifier)
        try container.encode(payload, forKey: .payload)
        try container.encode(priority, forKey: .priority)
        try container.encode(enqueueSequence, forKey: .enqueueSequence)
        try container.encode(enqueuedAt, forKey: .enqueuedAt)
        try container.encodeIfPresent(notBefore, forKey: .notBefore)
        try container.encode(tags, forKey: .tags)
        try container.encodeIfPresent(uniqueKey, forKey: .uniqueKey)
        try container.encode(numberOfRetries, forKey: .numberOfRetries)
        try container.encode(numberOfAttempts, forKey: .numberOfAttempts)
        try container.encodeIfPresent(nextAttemptAt, forKey: .nextAttemptAt)
        try container.encode(attemptsInFlight, forKey: .attemptsInFlight)
        try container.encodeIfPresent(lastErrorDescription, forKey: .lastErrorDescription)
        try container.encodeIfPresent(failureReason, forKey: .failureReason)
        try container.encode(prerequisites, forKey: .prerequisites)
        try container.encodeIfPresent(batchID, forKey: .batchID)
        try container.encodeIfPresent(failedPrerequisite, forKey: .failedPrerequisite)
        try container.encodeIfPresent(expiresAt, forKey: .expiresAt)
        try container.encode(conditions, forKey: .conditions)
        try container.encodeIfPresent(repeatInterval, forKey: .repeatInterval)
        try container.encode(repeatFlex, forKey: .repeatFlex)
        try container.encodeIfPresent(periodTarget, forKey: .periodTarget)
        try container.encode(completedPeriods, forKey: .completedPeriods)
        try container.encodeIfPresent(lane, forKey: .lane)
        if laneHoldsOnFailure { try container.encode(true, forKey: .laneHoldsOnFailure) }
        if isHoldingLane { try container.encode(true, forKey: .isHoldingLane) }
        if payloadVersion != 1 { try container.encode(payloadVersion, forKey: .payloadVersion) }
        try container.encodeIfPresent(idempotencyKey, forKey: .idempotencyKey)
        if let progressUnits {
            try container.encode(progressUnits.completed, forKey: .progressCompleted)
            try container.encode(progressUnits.total, forKey: .progressTotal)
        }
    }

    /// Records are equal when every field is; ``formatVersion`` says how the record was read or
    /// will be written, not what it holds, and is not compared.
    package static func == (lhs: OperationRecord, rhs: OperationRecord) -> Bool {
        lhs.id == rhs.id && lhs.typeIdentifier == rhs.typeIdentifier && lhs.payload == rhs.payload
            && lhs.priority == rhs.priority && lhs.enqueueSequence == rhs.enqueueSequence
            && lhs.enqueuedAt == rhs.enqueuedAt && lhs.notBefore == rhs.notBefore && lhs.tags == rhs.tags
            && lhs.uniqueKey == rhs.uniqueKey && lhs.numberOfRetries == rhs.numberOfRetries
            && lhs.numberOfAttempts == rhs.numberOfAttempts && lhs.nextAttemptAt == rhs.nextAttemptAt
            && lhs.attemptsInFlight == rhs.attemptsInFlight && lhs.lastErrorDescription == rhs.lastErrorDescription
            && lhs.failureReason == rhs.failureReason && lhs.prerequisites == rhs.prerequisites
            && lhs.batchID == rhs.batchID && lhs.failedPrerequisite == rhs.failedPrerequisite
            && lhs.expiresAt == rhs.expiresAt && lhs.conditions == rhs.conditions
            && lhs.repeatInterval == rhs.repeatInterval && lhs.repeatFlex == rhs.repeatFlex
            && lhs.periodTarget == rhs.periodTarget && lhs.completedPeriods == rhs.completedPeriods
            && lhs.lane == rhs.lane && lhs.laneHoldsOnFailure == rhs.laneHoldsOnFailure && lhs.isHoldingLane == rhs.isHoldingLane
            && lhs.payloadVersion == rhs.payloadVersion && lhs.idempotencyKey == rhs.idempotencyKey
            && lhs.progressUnits == rhs.progressUnits
    }

    /// The lowest format version that holds every field of the record, for a file of the
    /// one-file-per-record layout: 4 when it is periodic, 3 when it has an expiration date or
    /// conditions, 2 when it has prerequisites, a batch or a failed prerequisite, 1 otherwise.
    /// (Version 5 holds every record too; the journal writes it.) A record in a lane needs
    /// version 6, which no one-file-per-record reader knows.
    package var requiredFormatVersion: Int {
        if lane != nil { return 6 }
        if repeatInterval != nil { return 4 }
        if expiresAt != nil || !conditions.isEmpty { return 3 }
        return prerequisites.isEmpty && batchID == nil && failedPrerequisite == nil ? 1 : 2
    }


    /// The format version the journal writes the record in: 6 for a record in a lane, 5 for
    /// every other (so that a reader of version 5 still reads the records that do not need 6).
    package var journalFormatVersion: Int { lane != nil ? 6 : 5 }

    /// When the operation may next start: the later of its not-before and next-attempt
    /// dates, `nil` when it may start now.
    package var dueDate: Date? {
        Self.dueDate(notBefore: notBefore, nextAttemptAt: nextAttemptAt)
    }

    /// The later of a not-before and a next-attempt date, `nil` when neither is set: when a
    /// record with those dates is due (``dueDate``; also for the fields read without a record).
    package static func dueDate<Instant: Comparable>(notBefore: Instant?, nextAttemptAt: Instant?) -> Instant? {
        switch (notBefore, nextAttemptAt) {
        case (let notBefore?, let next?): max(notBefore, next)
        case (let date?, nil), (nil, let date?): date
        case (nil, nil): nil
        }
    }

    /// Whether the record is a periodic operation's.
    package var isPeriodic: Bool { repeatInterval != nil }

    /// Whether the record is a periodic operation's saved between two periods: a period ended,
    /// and the next one has made no attempt that a retry saved.
    package var isBetweenPeriods: Bool { isPeriodic && completedPeriods > 0 && numberOfAttempts == 0 }

    /// Where the record stands in run order (see ``RunOrder``).
    package var runOrder: RunOrder {
        RunOrder(priority: priority, enqueueSequence: enqueueSequence)
    }

    /// The order in which pending records run: higher ``priority`` first, then lower
    /// ``enqueueSequence`` (first in, first out).
    package static func runsBefore(_ lhs: OperationRecord, _ rhs: OperationRecord) -> Bool {
        lhs.runOrder < rhs.runOrder
    }

    /// Whether `id` has the shape of a library-generated identifier, and so is safe as a file name.
    package static func isValidIdentifier(_ id: String) -> Bool {
        RecordIdentifier.isValid(id)
    }
}

extension OperationRecord {
    /// A record held without its identifier and payload, its type identifier as an ordinal, in
    /// 56 bytes instead of 144 plus the identifier's allocation: what the queue keeps of a
    /// pending operation that waits its turn (see `PersistentOperationQueue.EntryTable`). The
    /// fields few records set stay in the record's copy-on-write box, shared with the record it
    /// was made from. Counts are held in 16 bits and the priority in 8 (an
    /// `Operation.QueuePriority` takes -8 to 8): a record whose values do not fit, or that
    /// counts attempts in flight itself (records of the journal count theirs in attempt
    /// frames), is kept whole.
    ///
    /// ```swift
    /// let record = OperationRecord(typeIdentifier: "com.example.upload", payload: Data(), enqueueSequence: 1)
    /// let types = ["com.example.upload"]                      // what `type` 0 stands for
    /// let compact = OperationRecord.Compact(record, type: 0)!  // nil: a payload, or counts past 16 bits
    /// let same = compact.record(id: record.id, typeIdentifier: types[Int(compact.type)]) == record   // true
    /// ```
    package struct Compact: Sendable {
        // (In this order: 50 bytes, so that an entry holding it with a timer and two small
        // fields takes 64.)
        private let extras: Extras?
        private let enqueueSequence: UInt64
        private let enqueuedAt: Double
        /// NaN: none.
        private let notBefore: Double
        /// NaN: none.
        private let nextAttemptAt: Double
        /// The record's type identifier, as an ordinal into a list its holder keeps (a
        /// `String` would take 16 bytes, an entry 8 more).
        package let type: UInt32
        private let numberOfRetries: UInt16
        private let numberOfAttempts: UInt16
        private let priority: Int8
        private let formatVersion: UInt8

        /// The compact form of `record`, its type identifier held as `type`, or `nil` when it
        /// holds a payload, a value that does not fit (see above) or attempts in flight (none
        /// the queue makes: it is then kept whole).
        package init?(_ record: OperationRecord, type: UInt32) {
            guard record.payload.isEmpty, record.attemptsInFlight == 0 else { return nil }
            self.init(
                type: type, extras: record.extras, priority: record.priority,
                enqueueSequence: record.enqueueSequence, enqueuedAt: record.enqueuedAt.timeIntervalSinceReferenceDate,
                notBefore: record.notBefore?.timeIntervalSinceReferenceDate, nextAttemptAt: record.nextAttemptAt?.timeIntervalSinceReferenceDate,
                numberOfRetries: record.numberOfRetries, numberOfAttempts: record.numberOfAttempts, formatVersion: record.formatVersion
            )
        }

        /// The compact form of the plain record `fields` (see
        /// ``RecordFormat/plainFields(of:maximumSize:checksumVerified:typeIdentifiers:)``), its
        /// type identifier held as `type`, or `nil` when a value does not fit or it has
        /// attempts in flight.
        package init?(plain fields: RecordFormat.PlainFields, type: UInt32) {
            guard fields.attemptsInFlight == 0 else { return nil }
            self.init(
                type: type, extras: nil, priority: fields.priority, enqueueSequence: fields.enqueueSequence,
                enqueuedAt: fields.enqueuedAt, notBefore: fields.notBefore, nextAttemptAt: fields.nextAttemptAt,
                numberOfRetries: fields.numberOfRetries, numberOfAttempts: fields.numberOfAttempts, formatVersion: fields.formatVersion
            )
        }

        /// These fields (dates in seconds since the reference date), or `nil` when a value does
        /// not fit (a date that is NaN included: NaN stands for none).
        private init?(
            type: UInt32, extras: Extras?, priority: Int, enqueueSequence: UInt64, enqueuedAt: Double, notBefore: Double?,
            nextAttemptAt: Double?, numberOfRetries: Int, numberOfAttempts: Int, formatVersion: Int
        ) {
            guard let retries = UInt16(exactly: numberOfRetries), let attempts = UInt16(exactly: numberOfAttempts),
                  let priority = Int8(exactly: priority), let version = UInt8(exactly: formatVersion),
                  notBefore?.isNaN != true, nextAttemptAt?.isNaN != true
            else { return nil }
            self.type = type
            self.extras = extras
            self.enqueueSequence = enqueueSequence
            self.enqueuedAt = enqueuedAt
            self.notBefore = notBefore ?? .nan
            self.nextAttemptAt = nextAttemptAt ?? .nan
            self.numberOfRetries = retries
            self.numberOfAttempts = attempts
            self.priority = priority
            self.formatVersion = version
        }

        /// The record's tags, read in place (see ``OperationRecord/tags``).
        package var tags: [String] { extras?.tags ?? [] }
        /// The record's lane, read in place (see ``OperationRecord/lane``).
        package var lane: String? { extras?.lane }

        /// The record again, with the identifier `id`, the type identifier `typeIdentifier`
        /// (the one ``type`` stands for) and no payload.
        package func record(id: String, typeIdentifier: String) -> OperationRecord {
            // Field by field, not through the record's initializer, which sets every rare
            // field through the box and works out the format version (this runs each time a
            // compact entry is read).
            OperationRecord(
                formatVersion: Int(formatVersion), id: id, typeIdentifier: typeIdentifier, payload: Data(), priority: Int(priority),
                enqueueSequence: enqueueSequence, enqueuedAt: Date(timeIntervalSinceReferenceDate: enqueuedAt),
                notBefore: notBefore.isNaN ? nil : Date(timeIntervalSinceReferenceDate: notBefore), numberOfRetries: Int(numberOfRetries),
                numberOfAttempts: Int(numberOfAttempts), nextAttemptAt: nextAttemptAt.isNaN ? nil : Date(timeIntervalSinceReferenceDate: nextAttemptAt),
                attemptsInFlight: 0, extras: extras
            )
        }
    }

    /// A record of only the fields every record has (none of the rare ones), without a
    /// payload: what ``RecordFormat/plainRecord(of:maximumSize:checksumVerified:)`` reads.
    package static func plain(
        formatVersion: Int, id: String, typeIdentifier: String, priority: Int, enqueueSequence: UInt64, enqueuedAt: Date,
        notBefore: Date?, numberOfRetries: Int, numberOfAttempts: Int, nextAttemptAt: Date?, attemptsInFlight: Int
    ) -> OperationRecord {
        OperationRecord(
            formatVersion: formatVersion, id: id, typeIdentifier: typeIdentifier, payload: Data(), priority: priority,
            enqueueSequence: enqueueSequence, enqueuedAt: enqueuedAt, notBefore: notBefore, numberOfRetries: numberOfRetries,
            numberOfAttempts: numberOfAttempts, nextAttemptAt: nextAttemptAt, attemptsInFlight: attemptsInFlight, extras: nil
        )
    }

    /// A record of exactly these stored fields (see ``Compact/record(id:typeIdentifier:)``); the rare ones in
    /// `extras`.
    private init(
        formatVersion: Int, id: String, typeIdentifier: String, payload: Data, priority: Int, enqueueSequence: UInt64, enqueuedAt: Date,
        notBefore: Date?, numberOfRetries: Int, numberOfAttempts: Int, nextAttemptAt: Date?, attemptsInFlight: Int, extras: Extras?
    ) {
        self.formatVersion = formatVersion
        self.id = id
        self.typeIdentifier = typeIdentifier
        self.payload = payload
        self.priority = priority
        self.enqueueSequence = enqueueSequence
        self.enqueuedAt = enqueuedAt
        self.notBefore = notBefore
        self.numberOfRetries = numberOfRetries
        self.numberOfAttempts = numberOfAttempts
        self.nextAttemptAt = nextAttemptAt
        self.attemptsInFlight = attemptsInFlight
        self.extras = extras
    }
}

/// The order in which pending operations run: a higher priority first, then the one
/// enqueued first. Smaller runs first.
package struct RunOrder: Comparable, Sendable {
    /// The operation's `queuePriority` raw value.
    package var priority: Int
    /// The record's enqueue sequence.
    package var enqueueSequence: UInt64

    package init(priority: Int, enqueueSequence: UInt64) {
        self.priority = priority
        self.enqueueSequence = enqueueSequence
    }

    package static func < (lhs: RunOrder, rhs: RunOrder) -> Bool {
        lhs.priority != rhs.priority ? lhs.priority > rhs.priority : lhs.enqueueSequence < rhs.enqueueSequence
    }
}
