import Foundation

// What the queue keeps for each stored operation, and the phases it moves through.
//
// How a stored operation moves through the queue:
//
//   scheduled ──due──▶ (ready) ──▶ queued ──slot starts──▶ running ──wait──▶ waitingToRetry
//   (timer)            (no room    (AttemptSlot in the      │                    │ retry due
//                       for a       OperationQueue)         │                    ▼
//                       slot yet)                           │      (ready ▶) queued (admission) ──▶ running …
//                                                           ▼
//                                           finished: record removed / moved to failed
//
//   blocked ──every prerequisite succeeded──▶ scheduled …
//   (waits for its prerequisites: no timer, no slot; see `+Graph`)
//
// At most `slotWindow()` slots sit in the OperationQueue at a time; due work beyond that waits
// in `State.ready`, a heap in run order, and gets a slot as one leaves. A restored operation is
// built from its record only when its first attempt starts (or when a query asks for it), so
// a restore of many records holds records, not operations.
//
// Every change of `Entry.phase` happens under `state`'s lock; slots are released, operations
// built, started or cancelled, records written and events emitted only after the lock is let go.

extension PersistentOperationQueue {
    struct Entry: Sendable {
        enum Phase: Sendable {
            /// Waiting in the timer for its not-before or next-attempt date (`nil` while
            /// being scheduled).
            case scheduled(DueTimer.Token?)
            /// Due, waiting in `State.ready` for room in the `OperationQueue`.
            case ready
            /// A slot is queued in the `OperationQueue`.
            case queued(AttemptSlot)
            /// An attempt runs, holding `slot` (`nil` for a cancelled operation started
            /// outside the queue so it can finish).
            case running(AttemptSlot?)
            /// A `RetryingOperation` between attempts.
            case waitingToRetry
            /// Waiting for prerequisites to succeed, or for its turn in its lane: in no timer,
            /// heap or slot.
            case blocked
            /// Due, but a run condition does not hold: in `State.conditionWaiters` under
            /// `parkedUnder`, in no timer, heap or slot (see `+Conditions`).
            case waitingForConditions
        }

        /// How an operation ended, as far as its dependents are concerned.
        enum Ending: Sendable {
            case succeeded
            case failed
            case cancelled
        }

        var record: OperationRecord
        /// The live operation; `nil` for a restored one until its first attempt starts (or a
        /// query asks for it), when it is built from `record`, and for an added one while it
        /// waits (see ``parkedOperation``).
        var operation: Operation?
        /// An operation added in this process, held weakly while it waits for its date, its
        /// prerequisites, its run conditions or room in a large backlog: the app's own
        /// references keep it, and once there are none it is built again from its record
        /// when due, as a restored one is (see `+Release`).
        weak var parkedOperation: Operation?
        /// The key of the entry's operation in `State.idsByOperation`, while it has one: the
        /// key of a parked operation that no longer exists is removed with it.
        var operationKey: ObjectIdentifier?
        var phase: Phase = .scheduled(nil)
        var hasStarted = false
        var attemptsInFlight: Int
        /// When the latest attempt started and ended (`DispatchTime` uptime, nanoseconds), for
        /// the events' `Subject.attemptDuration`; 0 before, and `attemptEndedAt` 0 while it
        /// runs or when the operation ends without a running attempt.
        var attemptStartedAt: UInt64 = 0
        var attemptEndedAt: UInt64 = 0
        /// A suspect file an earlier launch left for it exists, until its next attempt starts.
        var hasSuspectFile = false
        /// Cancelled (or replaced) and about to finish: it no longer holds its unique key.
        var isCancelRequested = false
        /// Prerequisites that have not succeeded yet; the entry is `blocked` while any remain.
        var remainingPrerequisites = 0
        /// In a lane, not its turn yet; the entry is `blocked` until it is (see `+Lanes`).
        var waitsForLane = false
        /// Set once the operation's end is being processed; a dependent linked to it from then
        /// on follows it at once.
        var ending: Ending?
        /// The record was already removed or moved because a prerequisite failed or was
        /// cancelled; the operation's own finish only makes the queue forget it.
        var isRecordSettled = false
        /// What few entries hold (see ``Extras``); `nil` while none of it is set.
        private var extras: Extras?

        init(record: OperationRecord, operation: Operation?, attemptsInFlight: Int) {
            self.record = record
            self.operation = operation
            self.attemptsInFlight = attemptsInFlight
        }

        /// The live operation, held or parked.
        var liveOperation: Operation? { operation ?? parkedOperation }

        /// The live operation, held again if it was parked (it is about to start or finish).
        mutating func holdLiveOperation() -> Operation? {
            if operation == nil, let parked = parkedOperation {
                operation = parked
                parkedOperation = nil
            }
            return operation
        }

        /// Crashes attributed to this operation (see `+Isolation`).
        var crashes: Int {
            get { extras?.crashes ?? 0 }
            set { extras.changeField(to: newValue, isDefault: newValue == 0) { $0.crashes = $1 } }
        }
        /// Kills while the app was active attributed to this operation, in a row (see `+Isolation`).
        var kills: Int {
            get { extras?.kills ?? 0 }
            set { extras.changeField(to: newValue, isDefault: newValue == 0) { $0.kills = $1 } }
        }
        /// The call that starts a due retry attempt, once its slot starts.
        var pendingAdmission: (@Sendable () -> Void)? {
            get { extras?.pendingAdmission }
            set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.pendingAdmission = $1 } }
        }
        /// Live dependents whose Foundation `dependencies` name this operation: kept alive until
        /// it has finished, because Foundation's `Operation` keeps only an unretained reference
        /// to them and touches it when this one finishes.
        var heldDependents: [Operation] {
            get { extras?.heldDependents ?? [] }
            set { extras.changeField(to: newValue, isDefault: newValue.isEmpty) { $0.heldDependents = $1 } }
        }
        /// The timer of the record's expiration date, while the operation has not started.
        var expiryTimer: DueTimer.Token? {
            get { extras?.expiryTimer }
            set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.expiryTimer = $1 } }
        }
        /// Set when the operation is finished because it expired before it started: its end,
        /// however the operation reports it, is this failure (see `+Deadlines`).
        var expiry: RetryingOperationError? {
            get { extras?.expiry }
            set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.expiry = $1 } }
        }
        /// The run condition the entry waits for while `waitingForConditions`.
        var parkedUnder: String? {
            get { extras?.parkedUnder }
            set { extras.changeField(to: newValue, isDefault: newValue == nil) { $0.parkedUnder = $1 } }
        }

        /// The bookkeeping only some entries need (crash evidence, a retry's admission, held
        /// dependents, an expiration, a run condition), out of line: an entry of a backlog
        /// takes about 200 bytes instead of 300. Shared by copies of an entry until one of
        /// them changes a field (copy on write); never changed while shared, hence `Sendable`.
        private final class Extras: CopyOnWriteFields, @unchecked Sendable {
            var crashes = 0
            var kills = 0
            var pendingAdmission: (@Sendable () -> Void)?
            var heldDependents: [Operation] = []
            var expiryTimer: DueTimer.Token?
            var expiry: RetryingOperationError?
            var parkedUnder: String?

            var isDefault: Bool {
                crashes == 0 && kills == 0 && pendingAdmission == nil && heldDependents.isEmpty
                    && expiryTimer == nil && expiry == nil && parkedUnder == nil
            }

            func copy() -> Extras {
                let copy = Extras()
                copy.crashes = crashes
                copy.kills = kills
                copy.pendingAdmission = pendingAdmission
                copy.heldDependents = heldDependents
                copy.expiryTimer = expiryTimer
                copy.expiry = expiry
                copy.parkedUnder = parkedUnder
                return copy
            }
        }

        /// What the queue keeps of an entry that waits its turn (due and waiting for room, or
        /// waiting for its date in the timer) with nothing of its own besides its record: 64
        /// bytes, against 240 and its identifier's allocation for the whole entry, so that a
        /// backlog of a million takes about a third of the memory (see ``EntryTable``).
        struct Compact: Sendable {
            // (In this order: 60 bytes, the record's 50 after the timer's 8.)
            /// The timer's call while `scheduled` (`nil` while being scheduled, as for
            /// ``Phase/scheduled(_:)``).
            let timerToken: DueTimer.Token?
            let record: OperationRecord.Compact
            /// Whether it is `ready` (else `scheduled`); set in place when a restore readies it.
            var isReady: Bool
            let attemptsInFlight: UInt8

            init(record: OperationRecord.Compact, timerToken: DueTimer.Token?, attemptsInFlight: UInt8, isReady: Bool) {
                self.timerToken = timerToken
                self.record = record
                self.isReady = isReady
                self.attemptsInFlight = attemptsInFlight
            }

            /// The entry again, with the identifier `id` and the type identifier `typeIdentifier`
            /// (the one `record.type` stands for).
            func entry(id: String, typeIdentifier: String) -> Entry {
                var entry = Entry(
                    record: record.record(id: id, typeIdentifier: typeIdentifier), operation: nil, attemptsInFlight: Int(attemptsInFlight)
                )
                entry.phase = isReady ? .ready : .scheduled(timerToken)
                return entry
            }
        }

        /// The compact form of the entry, its record's type identifier held as `type`, when it
        /// has nothing but its record (without a payload) and a phase of waiting its turn; `nil`
        /// otherwise.
        func compacted(type: UInt32) -> Compact? {
            let isReady: Bool
            let token: DueTimer.Token?
            switch phase {
            case .ready: (isReady, token) = (true, nil)
            case .scheduled(let scheduled): (isReady, token) = (false, scheduled)
            default: return nil
            }
            guard extras == nil, operation == nil, operationKey == nil, !hasStarted, attemptStartedAt == 0, attemptEndedAt == 0,
                  !hasSuspectFile, !isCancelRequested, remainingPrerequisites == 0, !waitsForLane, ending == nil, !isRecordSettled,
                  let inFlight = UInt8(exactly: attemptsInFlight), parkedOperation == nil,
                  let record = OperationRecord.Compact(record, type: type)
            else { return nil }
            return Compact(record: record, timerToken: token, attemptsInFlight: inFlight, isReady: isReady)
        }

        /// The state reported to users: a due retry queued for a slot still counts as
        /// waiting to retry.
        var infoState: PersistentOperationInfo.State {
            switch phase {
            case .scheduled: return .scheduled
            case .ready, .queued: return pendingAdmission == nil ? .queued : .waitingToRetry
            case .running: return .running
            case .waitingToRetry: return .waitingToRetry
            case .blocked: return remainingPrerequisites == 0 && waitsForLane ? .waitingForLane : .waitingForPrerequisites
            case .waitingForConditions:
                // Parked for a concurrency or start-rate limit, it waits for room, as a queued
                // one does.
                guard let key = parkedUnder else { return .waitingForConditions }
                return key.hasPrefix(PersistentOperationQueue.limitKeyPrefix) || key.hasPrefix(PersistentOperationQueue.rateKeyPrefix)
                    || key == PersistentOperationQueue.focusKey
                    ? .queued : .waitingForConditions
            }
        }
    }

    /// A due operation waiting for room in the `OperationQueue`: 40 bytes (``ReadyQueue``'s
    /// heap packs one into 32: a heap of a million due takes 32 MB).
    struct ReadySlot: Sendable {
        /// The entry's identifier, held without an allocation.
        var key: RecordKey
        /// The operation's priority, in 8 bits (an `Operation.QueuePriority` takes -8 to 8; a
        /// stored value beyond is held as the nearest that fits): placed here, it takes the
        /// room the key leaves before the next 8-byte field.
        private var priority: Int8
        /// Its group's turn, with fair sharing (see `+FairShare`); 0 without.
        var round: UInt64 = 0
        private var enqueueSequence: UInt64

        init(id: String, order: RunOrder) {
            self.init(key: RecordKey(id), order: order)
        }

        init(key: RecordKey, order: RunOrder) {
            self.key = key
            self.priority = Int8(clamping: order.priority)
            self.enqueueSequence = order.enqueueSequence
        }

        /// Where it runs: priority first, then the enqueue order.
        var order: RunOrder { RunOrder(priority: Int(priority), enqueueSequence: enqueueSequence) }

        /// The entry's identifier.
        var id: String { key.string }

        /// Priority first, then the turn, then the enqueue order.
        static func runsBefore(_ lhs: ReadySlot, _ rhs: ReadySlot) -> Bool {
            if lhs.priority != rhs.priority { return lhs.priority > rhs.priority }
            if lhs.round != rhs.round { return lhs.round < rhs.round }
            return lhs.enqueueSequence < rhs.enqueueSequence
        }
    }
}
