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
package struct OperationRecord: Codable, Sendable, Equatable {
    /// The only record format version this library writes and reads.
    package static let currentFormatVersion = 1

    /// The format version the record was read with or will be written with.
    package var formatVersion: Int
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
    /// Free-form labels used to query and cancel operations.
    package var tags: [String]
    /// A caller-chosen identifier for unique work, when set.
    package var uniqueKey: String?
    /// Retries counted against the retry budget so far.
    package var numberOfRetries: Int
    /// Attempts started so far, including attempts after uncounted waits.
    package var numberOfAttempts: Int
    /// When the next attempt is due, while the operation waits to retry.
    package var nextAttemptAt: Date?
    /// Consecutive launches during which an attempt started and was never recorded as ended;
    /// the crash-loop protection moves the record to the failed area when it reaches its limit.
    package var attemptsInFlight: Int
    /// The description of the error that ended the last attempt, when there was one.
    package var lastErrorDescription: String?
    /// Why the record is in the failed area; `nil` for pending records.
    package var failureReason: String?

    /// Creates a record of format ``currentFormatVersion`` with a fresh identifier.
    package init(
        id: String = UUID().uuidString,
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
        failureReason: String? = nil
    ) {
        self.formatVersion = Self.currentFormatVersion
        self.id = id
        self.typeIdentifier = typeIdentifier
        self.payload = payload
        self.priority = priority
        self.enqueueSequence = enqueueSequence
        self.enqueuedAt = enqueuedAt
        self.notBefore = notBefore
        self.tags = tags
        self.uniqueKey = uniqueKey
        self.numberOfRetries = numberOfRetries
        self.numberOfAttempts = numberOfAttempts
        self.nextAttemptAt = nextAttemptAt
        self.attemptsInFlight = attemptsInFlight
        self.lastErrorDescription = lastErrorDescription
        self.failureReason = failureReason
    }

    /// When the operation may next start: the later of its not-before and next-attempt
    /// dates, `nil` when it may start now.
    package var dueDate: Date? {
        switch (notBefore, nextAttemptAt) {
        case (let notBefore?, let next?): return max(notBefore, next)
        case (let date?, nil), (nil, let date?): return date
        case (nil, nil): return nil
        }
    }

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
        guard let uuid = UUID(uuidString: id) else { return false }
        return uuid.uuidString == id
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
