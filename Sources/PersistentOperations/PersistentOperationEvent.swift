import Foundation

/// A change of state of a ``PersistentOperationQueue`` or one of its operations.
///
/// Events arrive in the order they happened, on a private serial queue, through
/// ``PersistentOperationQueue/events`` (an `AsyncStream`) and
/// ``PersistentOperationQueue/eventHandler``.
///
/// ```swift
/// for await event in queue.events {
///     switch event {
///     case .retryScheduled(let id, let isCounted, let retries, let date):
///         print("\(id) retries \(isCounted ? "(retry \(retries))" : "(uncounted)") at \(date.map(String.init(describing:)) ?? "a condition")")
///     case .failed(let id, let reason):
///         print("\(id) failed for good: \(reason)")
///     default:
///         break
///     }
/// }
/// ```
public enum PersistentOperationEvent: Sendable, Hashable {
    /// An operation was stored durably by `addOperation` (or re-queued from the failed area).
    case enqueued(PersistentOperationID, typeIdentifier: String)
    /// A stored operation was rebuilt by ``PersistentOperationQueue/restore()``.
    case restored(PersistentOperationID, typeIdentifier: String)
    /// An attempt started; `attempt` counts attempts across launches, from 1.
    case started(PersistentOperationID, attempt: Int)
    /// The record was updated and the operation waits for a retry. `nextAttemptAt` is `nil`
    /// when a condition (a retry helper other than a timer) ends the wait.
    case retryScheduled(PersistentOperationID, isCounted: Bool, numberOfRetries: Int, nextAttemptAt: Date?)
    /// The operation succeeded; its record was removed.
    case succeeded(PersistentOperationID)
    /// A period of a periodic operation (``EnqueueOptions/repeating``) ended — succeeded, or
    /// failed for good when `failure` is set — and its record was rescheduled: the next period
    /// may start at `nextPeriodAt` (its window's start). The series goes on either way;
    /// ``succeeded(_:)`` and ``failed(_:reason:)`` are not sent for a period.
    case periodEnded(PersistentOperationID, failure: String?, nextPeriodAt: Date)
    /// The operation failed for good; its record was moved to the failed area.
    case failed(PersistentOperationID, reason: String)
    /// The operation was cancelled; its record was removed.
    case cancelled(PersistentOperationID)
    /// The operation waits for `prerequisites` (the ones not finished yet) to succeed before
    /// its first attempt.
    case blocked(PersistentOperationID, prerequisites: [PersistentOperationID])
    /// Every prerequisite of the operation succeeded, or (in a lane) the operations before it
    /// in its lane ended; it is scheduled now.
    case unblocked(PersistentOperationID)
    /// The operation waits for its turn in `lane` (``EnqueueOptions/lane``): `ahead`
    /// operations of the lane come before it. ``unblocked(_:)`` follows when its turn comes.
    case waitingForLane(PersistentOperationID, lane: String, ahead: Int)
    /// The operation `by` failed for good as the current operation of `lane`, which holds
    /// (``EnqueueOptions/holdsLaneOnFailure``): the lane's other operations wait until it is
    /// re-queued or purged.
    case laneHeld(lane: String, by: PersistentOperationID)
    /// The operation will never run because `prerequisite` failed for good or was cancelled
    /// (or could not be read); a ``failed(_:reason:)`` or ``cancelled(_:)`` event for it follows.
    case abandoned(PersistentOperationID, prerequisite: PersistentOperationID)
    /// The operation's next attempt runs alone, with no other attempt in flight: it was in
    /// flight when an earlier launch crashed, or was killed while the app was active (beside
    /// others, or alone `crashes` times: the crashes, or the kills in a row, on file), and a
    /// crash during this attempt — or a kill while the app is active — is attributed to it. A
    /// ``started(_:attempt:)`` event follows. See ``PersistentOperationQueue/Configuration/crashLoopLimit``.
    case runningAlone(PersistentOperationID, crashes: Int)
    /// A stored entry could not be used and was moved to the quarantine area.
    case quarantined(entryName: String, reason: String)
    /// A stored record names a type that was never registered; it stays on disk untouched.
    case unknownType(PersistentOperationID, typeIdentifier: String)
    /// A restored record names run conditions no provider is registered for; it waits, never
    /// run, until one is registered under each name (``PersistentOperationQueue/register(_:as:)``).
    case unknownConditions(PersistentOperationID, conditions: [String])
    /// Saving a change failed; the operation goes on, and the previous record stays on disk.
    case storeError(PersistentOperationID?, message: String)
    /// The progress of a group of operations whose progress was asked for
    /// (``PersistentOperationQueue/progress(for:)``) moved: `fractionCompleted` of the
    /// `operations` it counts (ended ones whole, pending ones by the fraction they reported).
    /// At most one an interval (``PersistentOperationQueue/Configuration/progressInterval``)
    /// for each group, however often its operations report; none for groups nobody asked for.
    case progress(PersistentOperationQueue.ProgressScope, fractionCompleted: Double, operations: Int)
}

extension PersistentOperationEvent {
    /// What an event's operation is, as the queue knew it when it emitted the event: for
    /// ``PersistentOperationQueue/eventHandlerWithSubject`` and
    /// ``PersistentOperationQueue/addEventObserver(_:)``, so that an app can tell which kind of
    /// work finished (a badge per conversation, a count per type) without a map of its own,
    /// and a metrics backend can time attempts.
    ///
    /// ```swift
    /// queue.addEventObserver { event, subject in
    ///     guard let subject else { return }
    ///     if case .succeeded = event, let duration = subject.attemptDuration {
    ///         print("\(subject.typeIdentifier) succeeded at attempt \(subject.attempt) in \(duration) s")
    ///     }
    /// }
    /// ```
    public struct Subject: Sendable, Hashable {
        /// The operation type's ``PersistentOperation/persistenceIdentifier``.
        public var typeIdentifier: String
        /// The tags it was added with (``EnqueueOptions/tags``).
        public var tags: Set<String>
        /// Its ordered lane (``EnqueueOptions/lane``), if any.
        public var lane: String?
        /// The attempts started so far, across launches: for
        /// ``PersistentOperationEvent/started(_:attempt:)``, the number of the attempt that
        /// starts; for an event that ends an attempt, the number of that attempt; 0 before the
        /// first.
        public var attempt: Int
        /// For an event that ends an attempt — ``PersistentOperationEvent/retryScheduled(_:isCounted:numberOfRetries:nextAttemptAt:)``,
        /// ``PersistentOperationEvent/succeeded(_:)``, ``PersistentOperationEvent/failed(_:reason:)``,
        /// ``PersistentOperationEvent/periodEnded(_:failure:nextPeriodAt:)`` and
        /// ``PersistentOperationEvent/cancelled(_:)`` of a running operation — the seconds the
        /// attempt ran, measured on a monotonic clock; `nil` for every other event, and for an
        /// operation that ended while it was not running (cancelled or expired while it waited,
        /// abandoned with a prerequisite).
        public var attemptDuration: TimeInterval?
        /// When the operation was first stored by `addOperation` (for a periodic series, when
        /// the series was); `nil` when the queue did not know. The time from here to the event
        /// that ends an operation is its time from enqueue to done.
        public var enqueuedAt: Date?

        public init(typeIdentifier: String, tags: Set<String>, lane: String?) {
            self.init(typeIdentifier: typeIdentifier, tags: tags, lane: lane, attempt: 0, attemptDuration: nil, enqueuedAt: nil)
        }

        public init(typeIdentifier: String, tags: Set<String>, lane: String?, attempt: Int, attemptDuration: TimeInterval?, enqueuedAt: Date?) {
            self.typeIdentifier = typeIdentifier
            self.tags = tags
            self.lane = lane
            self.attempt = attempt
            self.attemptDuration = attemptDuration
            self.enqueuedAt = enqueuedAt
        }
    }

    /// Whether the event can end an attempt (see ``Subject/attemptDuration``).
    var canEndAttempt: Bool {
        switch self {
        case .retryScheduled, .succeeded, .failed, .periodEnded, .cancelled: return true
        default: return false
        }
    }

    /// The operation the event is about; `nil` for ``quarantined(entryName:reason:)`` and
    /// for a ``storeError(_:message:)`` of no particular operation. For
    /// ``laneHeld(lane:by:)``, the operation holding the lane.
    public var operationID: PersistentOperationID? {
        switch self {
        case .enqueued(let id, _), .restored(let id, _), .started(let id, _), .retryScheduled(let id, _, _, _),
             .succeeded(let id), .periodEnded(let id, _, _), .failed(let id, _), .cancelled(let id),
             .blocked(let id, _), .unblocked(let id), .waitingForLane(let id, _, _), .laneHeld(_, let id),
             .abandoned(let id, _), .runningAlone(let id, _), .unknownType(let id, _), .unknownConditions(let id, _):
            return id
        case .storeError(let id, _):
            return id
        case .quarantined, .progress:
            return nil
        }
    }
}
