import CrashHarness
import Foundation
import PersistentOperations

/// Checks the at-least-once contract over the effects journal of a crash soak and the store
/// it left, and counts what happened. The same rules as the child-process tests' verifier,
/// widened for crash-looped uploads and crashers.
///
/// - Every upload 0..<count was acknowledged (or finished) by some launch.
/// - Every acknowledged upload completed, or sits in the failed area: refused uploads with
///   their refusal, crashers and uploads in flight at `crashLoopLimit` consecutive kills with
///   the crash-loop reason. None is lost.
/// - No upload started again after its record was removed; retry counts never went down;
///   attempt numbers always went up; an upload completed twice only in different launches
///   (the first one killed before the record was removed).
/// - No launch quarantined anything, the last launch finished, nothing is pending, no
///   temporary file is left in any area, and the store opens read-write.
struct SoakVerifier {
    struct Tally {
        var launches = 0
        var acknowledged = 0
        var completed = 0
        var refused = 0
        var crashLoopedCrashers = 0
        var crashLoopedOthers = 0
        var lost = 0
        var ranTwice = 0
        var quarantined = 0
        var temporaryFilesAtEnd = 0
        var pendingAtEnd = 0
        var reopens = false
    }

    struct FailedUpload {
        var index: Int
        var behaviour: UploadBehaviour
        var reason: String
    }

    let events: [JournalEvent]
    let count: Int
    let store: URL
    let failed: [FailedUpload]
    private(set) var problems: [String] = []
    private(set) var tally = Tally()

    init(effects: String, store: URL, count: Int) throws {
        events = try JournalTail.allEvents(at: effects)
        self.count = count
        self.store = store
        failed = try RecordStore(directory: store, access: .readOnly).loadFailed().records.map { record in
            let job = try RecordFormat.decodePayload(UploadJob.self, from: record.payload)
            return FailedUpload(index: job.index, behaviour: job.behaviour, reason: record.failureReason ?? "")
        }
    }

    mutating func verify() {
        checkOutcomes()
        checkOrder()
        checkStore()
    }

    private mutating func checkOutcomes() {
        // Events of the last operations may be journaled just after `finished`.
        let lastLaunch = events.lastIndex { if case .launch = $0 { true } else { false } } ?? events.endIndex
        if !events[lastLaunch...].contains(.finished) { problems.append("the last launch did not finish") }
        var acknowledged = Set<Int>()
        var done = Set<Int>()
        for event in events {
            switch event {
            case .launch(_, _, let quarantined, _):
                tally.launches += 1
                tally.quarantined += quarantined
            case .acknowledged(let index, _, _):
                acknowledged.insert(index)
            case .done(let index):
                done.insert(index)
            default:
                break
            }
        }
        if tally.quarantined > 0 { problems.append("\(tally.quarantined) entries were quarantined: a kill left a damaged record") }

        let failedByIndex = Dictionary(failed.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        if failedByIndex.count != failed.count { problems.append("an upload sits twice in the failed area") }
        tally.acknowledged = acknowledged.count
        tally.completed = done.count
        let missing = Set(0..<count).subtracting(acknowledged).subtracting(done).subtracting(failedByIndex.keys)
        if !missing.isEmpty { problems.append("never acknowledged: \(missing.sorted().prefix(20))") }

        var lost: [Int] = []
        for index in acknowledged.sorted() {
            if let failure = failedByIndex[index] {
                let crashLooped = failure.reason.contains("consecutive crashes")
                switch failure.behaviour {
                case .refused:
                    if crashLooped { tally.crashLoopedOthers += 1 } else { tally.refused += 1 }
                case .crashesTheApp:
                    tally.crashLoopedCrashers += 1
                    if !crashLooped { problems.append("crasher \(index) is in the failed area without the crash-loop reason: \(failure.reason)") }
                case .succeeds, .flaky, .waitsForNetwork:
                    tally.crashLoopedOthers += 1
                    if !crashLooped { problems.append("upload \(index) (\(failure.behaviour)) failed for good: \(failure.reason)") }
                }
                if failure.behaviour == .refused || failure.behaviour == .crashesTheApp, done.contains(index) {
                    problems.append("upload \(index) (\(failure.behaviour)) completed")
                }
            } else if !done.contains(index) {
                lost.append(index)
            }
        }
        tally.lost = lost.count
        if !lost.isEmpty { problems.append("lost (acknowledged, never completed, not in the failed area): \(lost.prefix(20))") }
    }

    private mutating func checkOrder() {
        var contract = ContractReplay()
        for event in events {
            contract.observe(event)
        }
        problems += contract.violations
        tally.ranTwice = contract.ranTwice.count
    }

    private mutating func checkStore() {
        var leftovers: [String] = []
        let layout = StoreLayout(directory: store)
        for area in StoreLayout.Area.allCases {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: layout.path(of: area))) ?? []
            leftovers += names.filter(StoreLayout.isTemporaryFileName).map { "\(area.rawValue)/\($0)" }
            if area == .pending { tally.pendingAtEnd = names.count }
        }
        tally.temporaryFilesAtEnd = leftovers.count
        if !leftovers.isEmpty { problems.append("temporary files left: \(leftovers.prefix(10))") }
        if tally.pendingAtEnd > 0 { problems.append("\(tally.pendingAtEnd) entries still pending after the last launch finished") }
        do {
            let reopened = try RecordStore(directory: store)
            _ = try reopened.loadPending()
            reopened.close()
            tally.reopens = true
        } catch {
            problems.append("the store does not open read-write: \(error)")
        }
    }
}
