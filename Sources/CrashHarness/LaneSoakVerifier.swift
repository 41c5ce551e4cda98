import Foundation

/// What the store held at the end of the lane soak for one message, read by the caller (this
/// module knows nothing of the store's types).
package struct LaneStoredMessage: Sendable, Hashable {
    package var index: Int
    /// Whether the record is in the failed area; otherwise it is still pending.
    package var isFailed: Bool
    package var failureReason: String?
    package var expirationDate: Date?
    /// Whether the failed record holds its lane.
    package var isHoldingLane: Bool

    package init(index: Int, isFailed: Bool, failureReason: String?, expirationDate: Date?, isHoldingLane: Bool) {
        self.index = index
        self.isFailed = isFailed
        self.failureReason = failureReason
        self.expirationDate = expirationDate
        self.isHoldingLane = isHoldingLane
    }
}

/// Checks the lane contract over the effects journal of a lane soak and the store it left,
/// and counts what happened. Every rule is per lane (``LanePlan``):
///
/// - **One at a time**: within a launch, no attempt of a message starts while an attempt of
///   another message of its lane has started and not ended (an attempt in flight at a kill
///   ends with its launch).
/// - **In add order**: no message's first attempt starts before every earlier message of its
///   lane has ended: succeeded, failed for good (in a lane that holds on a failure: purged
///   instead), cancelled (its cancel request journaled) or expired (its expiration date, read
///   from its record in the failed area, passed). A message that a launch restores has not
///   ended, whatever earlier launches journaled about it.
/// - **The lane moves on**: after the last launch, which must finish, no message is pending
///   and no failure holds a lane.
/// - **Nothing lost**: every message 0..<count was acknowledged, and succeeded, sits in the
///   failed area for a reason it may fail for (refused, or expired when it was added with an
///   expiration date), was cancelled, or was purged.
package struct LaneSoakVerifier {
    /// What the journal and the store show.
    package struct Tally: Sendable {
        package var launches = 0
        package var launchesFinished = 0
        package var launchesAddingBeforeRestore = 0
        /// Launches that ended without `finished`: killed.
        package var launchesCut = 0
        /// Killed launches with at least one attempt in flight at the kill.
        package var launchesCutMidAttempt = 0
        /// Attempts in flight when their launch was killed.
        package var attemptsCut = 0
        package var acknowledged = 0
        package var attempts = 0
        package var retries = 0
        /// First attempts whose lane order was checked (messages after the first of a lane).
        package var firstAttemptsChecked = 0
        /// Attempts that started while another message of their lane was in flight.
        package var overlaps = 0
        /// First attempts that started before an earlier message of their lane had ended.
        package var outOfOrder = 0
        /// The most lanes seen with an attempt in flight at once.
        package var mostLanesInFlight = 0
        package var succeeded = 0
        package var failedForGood = 0
        package var expired = 0
        /// Expired messages that had started an attempt: they expired while waiting to retry.
        package var expiredAfterStarting = 0
        package var cancelled = 0
        package var purged = 0
        package var requeues = 0
        package var pendingAtEnd = 0
    }

    package let plan: LanePlan
    package let count: Int
    /// Broken rules, for people; empty when the contract held.
    package private(set) var problems: [String] = []
    package private(set) var tally = Tally()

    // The replay, launch by launch.
    private var launch = 0
    private var hasFinishedLaunch = false
    private var inFlight: [Int: Set<Int>] = [:]
    private var started = Set<Int>()
    private var acknowledged = Set<Int>()
    private var restored = Set<Int>()
    // How each message ended, as far as the journal has shown; cleared when a launch restores it.
    private var done = Set<Int>()
    private var failed = Set<Int>()
    private var cancelRequested = Set<Int>()
    private var purged = Set<Int>()
    /// The expiration dates of the messages that sit in the failed area as expired.
    private let expiredAt: [Int: Date]

    /// Replays `events` and checks `stored` (every record of the store after the last launch).
    package init(events: [LaneJournalEvent], stored: [LaneStoredMessage], count: Int, plan: LanePlan) {
        self.plan = plan
        self.count = count
        var expiredAt: [Int: Date] = [:]
        for message in stored where message.isFailed && message.failureReason?.contains("expired") == true {
            if let date = message.expirationDate { expiredAt[message.index] = date }
        }
        self.expiredAt = expiredAt
        for event in events {
            observe(event)
        }
        if launch == 0 {
            problems.append("the journal shows no launch")
        } else if !hasFinishedLaunch {
            problems.append("the last launch (\(launch)) did not finish")
        }
        closeLaunch()
        checkOutcomes(stored)
    }

    private func describe(_ index: Int) -> String {
        "message \(index) (\(plan.name(ofLane: plan.lane(of: index))) #\(plan.position(of: index)))"
    }

    private mutating func observe(_ event: LaneJournalEvent) {
        switch event {
        case .launch(_, let addsBeforeRestore):
            closeLaunch()
            launch += 1
            tally.launches += 1
            if addsBeforeRestore { tally.launchesAddingBeforeRestore += 1 }
        case .restored(let index, _):
            // Pending again: whatever an earlier launch journaled, it has not ended.
            restored.insert(index)
            done.remove(index)
            failed.remove(index)
            cancelRequested.remove(index)
            purged.remove(index)
        case .acknowledged(let index, _):
            acknowledged.insert(index)
        case .cancelRequested(let index):
            cancelRequested.insert(index)
        case .started(let index, _, _, let date):
            start(index, at: date)
        case .ended(let index, let end):
            let lane = plan.lane(of: index)
            if inFlight[lane]?.remove(index) == nil {
                problems.append("launch \(launch): \(describe(index)) ended an attempt (\(end.rawValue)) that had not started in this launch")
            }
            switch end {
            case .done: done.insert(index)
            case .fail: failed.insert(index)
            case .retry: tally.retries += 1
            case .cancelled: break
            }
        case .requeueRequested:
            tally.requeues += 1
        case .purgeRequested(let index):
            purged.insert(index)
        case .finished:
            hasFinishedLaunch = true
            tally.launchesFinished += 1
        case .unknown(let line):
            problems.append("launch \(launch): unknown journal line \"\(line)\"")
        }
    }

    /// One at a time, and (for a first attempt) in add order.
    private mutating func start(_ index: Int, at date: Date) {
        tally.attempts += 1
        let lane = plan.lane(of: index)
        let running = inFlight[lane, default: []]
        if running.contains(index) {
            problems.append("launch \(launch): \(describe(index)) started an attempt while another of its attempts was in flight")
        }
        let others = running.subtracting([index])
        if !others.isEmpty {
            tally.overlaps += 1
            problems.append("launch \(launch): \(describe(index)) started while \(others.sorted().map(describe).joined(separator: ", ")) of its lane was in flight")
        }
        if !started.contains(index) {
            let earlier = Array(plan.earlierMessages(than: index))
            if !earlier.isEmpty { tally.firstAttemptsChecked += 1 }
            let notEnded = earlier.filter { !hasEnded($0, by: date) }
            if !notEnded.isEmpty {
                tally.outOfOrder += 1
                let names = notEnded.prefix(5).map(describe).joined(separator: ", ") + (notEnded.count > 5 ? ", …" : "")
                problems.append("launch \(launch): \(describe(index)) started its first attempt before \(names) had ended")
            }
        }
        started.insert(index)
        inFlight[lane, default: []].insert(index)
        tally.mostLanesInFlight = max(tally.mostLanesInFlight, inFlight.values.filter { !$0.isEmpty }.count)
    }

    /// Whether message `index` had ended by `date`, as far as the journal has shown.
    private func hasEnded(_ index: Int, by date: Date) -> Bool {
        if done.contains(index) || cancelRequested.contains(index) { return true }
        if plan.holdsOnFailure(plan.lane(of: index)) {
            if purged.contains(index) { return true }
        } else if failed.contains(index) {
            return true
        }
        // The date and the journal's time stamps are both the wall clock; the stamps are
        // rounded to the microsecond.
        if let expiry = expiredAt[index], expiry <= date.addingTimeInterval(0.000_001) { return true }
        return false
    }

    /// Ends the current launch: attempts still in flight were cut by a kill.
    private mutating func closeLaunch() {
        guard launch > 0 else { return }
        let cut = inFlight.values.reduce(0) { $0 + $1.count }
        if hasFinishedLaunch {
            if cut > 0 { problems.append("launch \(launch) finished with \(cut) attempts in flight") }
        } else {
            tally.launchesCut += 1
            tally.attemptsCut += cut
            if cut > 0 { tally.launchesCutMidAttempt += 1 }
        }
        inFlight = [:]
        hasFinishedLaunch = false
    }

    /// The lane moved on and nothing was lost.
    private mutating func checkOutcomes(_ stored: [LaneStoredMessage]) {
        tally.acknowledged = acknowledged.count
        let byIndex = Dictionary(grouping: stored, by: \.index)
        for (index, records) in byIndex.sorted(by: { $0.key < $1.key }) where records.count > 1 {
            problems.append("\(describe(index)) has \(records.count) records in the store")
        }
        for (index, _) in byIndex.sorted(by: { $0.key < $1.key }) where !(0..<count).contains(index) {
            problems.append("the store holds message \(index), beyond the \(count) messages of the soak")
        }
        var lost: [Int] = []
        for index in 0..<count {
            let behaviour = plan.behaviour(of: index)
            if !acknowledged.contains(index) && !restored.contains(index) && !started.contains(index) {
                problems.append("\(describe(index)) was never acknowledged")
            }
            if let record = byIndex[index]?.first {
                let reason = record.failureReason ?? "no reason"
                if !record.isFailed {
                    tally.pendingAtEnd += 1
                    problems.append("\(describe(index)) is still pending after the last launch: its lane did not move on")
                } else if record.isHoldingLane {
                    problems.append("\(describe(index)) still holds its lane after the last launch: \(reason)")
                } else if reason.contains("expired") {
                    tally.expired += 1
                    if started.contains(index) { tally.expiredAfterStarting += 1 }
                    if !plan.expires(index) { problems.append("\(describe(index)) expired, but was added without an expiration date") }
                } else if behaviour == .fails {
                    tally.failedForGood += 1
                    if !reason.contains("refused") { problems.append("\(describe(index)) failed for good for an unexpected reason: \(reason)") }
                } else {
                    problems.append("\(describe(index)) (\(behaviour.rawValue)) is in the failed area: \(reason)")
                }
            } else if done.contains(index) {
                tally.succeeded += 1
                if behaviour == .fails || behaviour == .cancelledWhileRunning {
                    problems.append("\(describe(index)) (\(behaviour.rawValue)) succeeded")
                }
            } else if cancelRequested.contains(index) {
                tally.cancelled += 1
            } else if purged.contains(index) {
                tally.purged += 1
            } else {
                lost.append(index)
            }
        }
        if !lost.isEmpty {
            problems.append("lost (no record left, yet never succeeded, cancelled or purged): \(lost.prefix(20).map(describe).joined(separator: ", "))")
        }
    }
}
