import Foundation

/// A snapshot of one operation of a ``PersistentOperationQueue``.
///
/// ```swift
/// for info in queue.operations(taggedWith: "uploads") where info.state == .waitingToRetry {
///     print("\(info.id): retry \(info.numberOfRetries) at \(String(describing: info.nextAttemptAt))")
/// }
/// ```
public struct PersistentOperationInfo: Sendable {
    /// Where an operation is in its life.
    public enum State: Sendable, Hashable {
        /// Waiting for its not-before date (or, after a restore, its next-attempt date).
        case scheduled
        /// Due, and queued in the `OperationQueue` for a free slot.
        case queued
        /// An attempt is running.
        case running
        /// Between attempts, waiting for a retry.
        case waitingToRetry
        /// Waiting for its ``PersistentOperationInfo/prerequisites`` to succeed; it holds no
        /// slot and no timer.
        case waitingForPrerequisites
        /// Due, but one of its ``PersistentOperationInfo/conditions`` does not hold (or has no
        /// provider registered): it holds no slot and no timer, and starts as soon as they all
        /// hold.
        case waitingForConditions
        /// Waiting for its turn in its ``PersistentOperationInfo/lane``: an operation added
        /// to the lane before it has not ended yet (or a failure holds the lane). It holds no
        /// slot and no timer.
        case waitingForLane
    }

    /// The identifier of the operation's record.
    public var id: PersistentOperationID
    /// The type's ``PersistentOperation/persistenceIdentifier``.
    public var typeIdentifier: String
    /// The live operation. A restored operation is built from its record when first asked
    /// for (here or when its first attempt starts), once; this is the instance that runs.
    public var operation: Operation
    /// Where the operation is in its life.
    public var state: State
    /// The tags it was added with.
    public var tags: Set<String>
    /// The unique key it was added with.
    public var uniqueKey: String?
    /// The saved priority (the operation's `queuePriority`).
    public var priority: Operation.QueuePriority
    /// When it was first added.
    public var enqueuedAt: Date
    /// The not-before date it was added with; for a periodic operation, the start of its
    /// current period's window.
    public var notBefore: Date?
    /// How it repeats, for a periodic operation (``EnqueueOptions/repeating``); `nil` otherwise.
    public var repeating: RepeatSchedule? = nil
    /// For a periodic operation, the target of its current period (it may start from
    /// ``notBefore``, the window's start).
    public var periodTarget: Date? = nil
    /// For a periodic operation, how many periods have ended (succeeded or failed).
    public var completedPeriods = 0
    /// The description of the error that ended the last attempt (or, for a periodic operation
    /// between periods, the failure of the last period), when there was one.
    public var lastErrorDescription: String? = nil
    /// No attempt starts at or after this date (``EnqueueOptions/expirationDate``).
    public var expirationDate: Date? = nil
    /// The run conditions that must all hold before an attempt starts
    /// (``EnqueueOptions/conditions``).
    public var conditions: Set<String> = []
    /// Counted retries saved so far.
    public var numberOfRetries: Int
    /// Attempts started so far, across launches: the running one, and any that were in
    /// flight when an earlier launch died, included. ``ReadOnlyPersistentStore`` and
    /// `store-inspector` report the same number.
    public var numberOfAttempts: Int
    /// When the next attempt is due, while waiting on a timer.
    public var nextAttemptAt: Date?
    /// The operations that must succeed before this one starts, as it was added with them
    /// (`b.addDependency(a)`); those that already succeeded are still listed.
    public var prerequisites: [PersistentOperationID] = []
    /// The prerequisites still unfinished; the operation is
    /// ``State-swift.enum/waitingForPrerequisites`` while this is not empty.
    public var unfinishedPrerequisites: [PersistentOperationID] = []
    /// The unfinished operations of the queue that wait for this one.
    public var dependents: [PersistentOperationID] = []
    /// The ordered lane it runs in (``EnqueueOptions/lane``), if any.
    public var lane: String? = nil
    /// In a lane: how many of the lane's operations come before it (0: it is the lane's
    /// current operation); `nil` without a lane, or while a failure holds the lane.
    public var lanePosition: Int? = nil
    /// Whether a failure for good of this operation, as its lane's current one, holds the
    /// lane (``EnqueueOptions/holdsLaneOnFailure``).
    public var holdsLaneOnFailure = false
}

/// A record of the failed (dead-letter) area of a ``PersistentOperationQueue``.
///
/// ```swift
/// for failed in try queue.failedOperations() {
///     print("\(failed.id) \(failed.typeIdentifier): \(failed.reason)")
/// }
/// try queue.retryAllFailedOperations()
/// ```
public struct FailedOperationInfo: Sendable, Hashable {
    /// The identifier of the record; the same it had while pending.
    public var id: PersistentOperationID
    /// The type's ``PersistentOperation/persistenceIdentifier``.
    public var typeIdentifier: String
    /// Why it failed: the error of a non-retriable failure, the retry limit, or repeated crashes.
    public var reason: String
    /// Counted retries made before it failed.
    public var numberOfRetries: Int
    /// Attempts made before it failed.
    public var numberOfAttempts: Int
    /// The tags it was added with.
    public var tags: Set<String>
    /// When it was first added.
    public var enqueuedAt: Date
    /// The operations it was added to wait for.
    public var prerequisites: [PersistentOperationID] = []
    /// The prerequisite whose failure failed this operation, when that is why it is here;
    /// re-queueing that prerequisite re-queues this one too.
    public var failedPrerequisite: PersistentOperationID?
}

/// How many operations a ``PersistentOperationQueue`` holds, by state.
///
/// ```swift
/// let counts = try queue.counts()
/// badge.value = counts.pending
/// ```
public struct PersistentQueueCounts: Sendable, Hashable {
    /// Operations not finished: ``scheduled`` + ``queued`` + ``running`` + ``waitingToRetry``
    /// + ``waitingForPrerequisites`` + ``waitingForConditions`` + ``waitingForLane``.
    public var pending: Int { scheduled + queued + running + waitingToRetry + waitingForPrerequisites + waitingForConditions + waitingForLane }
    /// Waiting for their not-before or next-attempt date.
    public var scheduled = 0
    /// Due and waiting for a slot in the `OperationQueue`.
    public var queued = 0
    /// Running an attempt.
    public var running = 0
    /// Between attempts.
    public var waitingToRetry = 0
    /// Waiting for prerequisites to succeed.
    public var waitingForPrerequisites = 0
    /// Due, waiting for their run conditions to hold.
    public var waitingForConditions = 0
    /// Waiting for their turn in an ordered lane (``EnqueueOptions/lane``).
    public var waitingForLane = 0
    /// Records in the failed area.
    public var failed = 0
    /// Entries in the quarantine area.
    public var quarantined = 0
    /// Pending records of unregistered types, kept on disk.
    public var unknownType = 0
}
