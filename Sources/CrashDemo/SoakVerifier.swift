import CrashHarness
import Foundation
import PersistentOperations

/// Checks the at-least-once contract over the effects journal of a crash soak and the store
/// it left, and counts what happened. The same rules as the child-process tests' verifier,
/// widened for crash-looped uploads, crashers and killers.
///
/// - Every upload 0..<count was acknowledged (or finished) by some launch.
/// - Every acknowledged upload completed, or sits in the failed area: refused uploads with
///   their refusal, crashers with the crash-loop reason. None is lost, and no upload that
///   does not crash the app is moved aside by crash-loop protection, however many kills it
///   was in flight at.
/// - No upload started again after its record was removed; retry counts never went down;
///   attempt numbers always went up; an upload completed twice only in different launches
///   (the first one killed before the record was removed).
/// - No launch quarantined anything, the last launch finished, nothing is pending, no
///   temporary file is left in any area, and the store opens read-write.
/// - The albums' graphs (``DemoAlbum``): no attempt started before each of its prerequisites'
///   success was journaled, no launch restored part of a stored batch (``ContractReplay``);
///   every node was stored, or not added because a prerequisite had failed; every stored node
///   completed or sits in the failed area, and a node fails only when it is refused, crash-looped,
///   or its prerequisite failed (named in its record).
struct SoakVerifier {
    struct Tally {
        var launches = 0
        var acknowledged = 0
        var completed = 0
        var refused = 0
        var crashLoopedCrashers = 0
        /// Killers (uploads that get the app SIGKILLed) moved aside by crash-loop protection.
        var crashLoopedKillers = 0
        var crashLoopedOthers = 0
        /// For each crasher, then each killer, moved aside: the launches that started an attempt of it.
        var launchesPerCrasher: [Int] = []
        var launchesPerKiller: [Int] = []
        var lost = 0
        var ranTwice = 0
        var quarantined = 0
        var temporaryFilesAtEnd = 0
        var pendingAtEnd = 0
        var reopens = false
        var graphNodes = 0
        var graphNodesCompleted = 0
        var graphNodesFailedWithPrerequisite = 0
        var graphNodesNotAdded = 0
        var startsBeforePrerequisites = 0
        var partlyRestoredBatches = 0
        /// Attempts that SIGTERM shutdowns stopped (as uncounted retries).
        var shutdownsStopped = 0
        /// Starts whose retry count exceeds the counted retries the upload asked for before them.
        var unaskedRetries = 0
    }

    struct FailedUpload {
        var id: String
        var index: Int
        var behaviour: UploadBehaviour
        var reason: String
        var failedPrerequisite: String?
    }

    let events: [JournalEvent]
    let count: Int
    let albums: Int
    let store: URL
    let failed: [FailedUpload]
    private(set) var problems: [String] = []
    private(set) var tally = Tally()

    init(effects: String, store: URL, count: Int, albums: Int = 0) throws {
        events = try JournalTail.allEvents(at: effects)
        self.count = count
        self.albums = albums
        self.store = store
        failed = try RecordStore(directory: store, access: .readOnly).loadFailed().records.map { record in
            let job = try RecordFormat.decodePayload(UploadJob.self, from: record.payload)
            return FailedUpload(
                id: record.id, index: job.index, behaviour: job.behaviour, reason: record.failureReason ?? "",
                failedPrerequisite: record.failedPrerequisite
            )
        }
    }

    mutating func verify() {
        countLaunchesPerPoison()
        checkRetryBudget()
        checkOutcomes()
        checkOrder()
        checkStore()
    }

    /// No retry is counted that the upload did not ask for: a kill, a crash of another
    /// operation and a SIGTERM shutdown (which stops attempts as uncounted retries) spend none.
    /// Each start's retry count is at most the `retry I counted` lines of its upload before it
    /// (fewer when a kill came between such a line and the saving of its retry). Poison
    /// uploads, which the crashes are blamed on, are left out.
    private mutating func checkRetryBudget() {
        let poisons = Set(failed.filter { $0.behaviour == .crashesTheApp || $0.behaviour == .killsTheApp }.map(\.index))
        var asked: [Int: Int] = [:]
        for event in events {
            switch event {
            case .retry(let index, true):
                asked[index, default: 0] += 1
            case .started(let index, let attempt, let retries) where !poisons.contains(index) && retries > asked[index, default: 0]:
                tally.unaskedRetries += 1
                problems.append("upload \(index) started attempt \(attempt) with \(retries) retries counted, but asked for \(asked[index, default: 0])")
            case .shutDown(let stopped, let stillRunning):
                tally.shutdownsStopped += stopped
                if stillRunning > 0 { problems.append("a SIGTERM shutdown left \(stillRunning) attempts running") }
            default:
                break
            }
        }
    }

    /// The launches that started an attempt of each poison upload moved aside.
    private mutating func countLaunchesPerPoison() {
        var launch = 0
        var launches: [Int: Set<Int>] = [:]
        for event in events {
            switch event {
            case .launch: launch += 1
            case .started(let index, _, _): launches[index, default: []].insert(launch)
            default: break
            }
        }
        for failure in failed.sorted(by: { $0.index < $1.index }) where failure.reason.contains("while its attempt ran alone") {
            let count = launches[failure.index]?.count ?? 0
            switch failure.behaviour {
            case .crashesTheApp: tally.launchesPerCrasher.append(count)
            case .killsTheApp: tally.launchesPerKiller.append(count)
            default: break
            }
        }
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
            case .acknowledged(let index, _, _) where AlbumGraph.node(of: index) == nil:
                acknowledged.insert(index)
            case .done(let index) where AlbumGraph.node(of: index) == nil:
                done.insert(index)
            default:
                break
            }
        }
        if tally.crashLoopedOthers > 0 {
            problems.append("\(tally.crashLoopedOthers) uploads that never crash the app were moved aside by crash-loop protection")
        }
        if tally.quarantined > 0 { problems.append("\(tally.quarantined) entries were quarantined: a kill left a damaged record") }

        let failedUploads = failed.filter { AlbumGraph.node(of: $0.index) == nil }
        let failedByIndex = Dictionary(failedUploads.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        if failedByIndex.count != failedUploads.count { problems.append("an upload sits twice in the failed area") }
        tally.acknowledged = acknowledged.count
        tally.completed = done.count
        let missing = Set(0..<count).subtracting(acknowledged).subtracting(done).subtracting(failedByIndex.keys)
        if !missing.isEmpty { problems.append("never acknowledged: \(missing.sorted().prefix(20))") }

        var lost: [Int] = []
        for index in acknowledged.sorted() {
            if let failure = failedByIndex[index] {
                let crashLooped = failure.reason.contains("while its attempt ran alone")
                switch failure.behaviour {
                case .refused:
                    if crashLooped { tally.crashLoopedOthers += 1 } else { tally.refused += 1 }
                case .crashesTheApp, .killsTheApp:
                    if failure.behaviour == .killsTheApp { tally.crashLoopedKillers += 1 } else { tally.crashLoopedCrashers += 1 }
                    if !crashLooped { problems.append("crasher \(index) is in the failed area without the crash-loop reason: \(failure.reason)") }
                case .succeeds, .flaky, .waitsForNetwork:
                    tally.crashLoopedOthers += 1
                    if !crashLooped { problems.append("upload \(index) (\(failure.behaviour)) failed for good: \(failure.reason)") }
                }
                if failure.behaviour == .refused || failure.behaviour == .crashesTheApp || failure.behaviour == .killsTheApp, done.contains(index) {
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
        tally.startsBeforePrerequisites = contract.startsBeforePrerequisites
        tally.partlyRestoredBatches = contract.partlyRestoredBatches
        checkGraphOutcomes(contract)
    }

    /// Every node of every album was stored or not added because a prerequisite failed; each
    /// stored one completed or failed for a reason it may fail for.
    private mutating func checkGraphOutcomes(_ contract: ContractReplay) {
        let failedNodes = failed.filter { AlbumGraph.node(of: $0.index) != nil }
        let failedByIndex = Dictionary(failedNodes.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        if failedByIndex.count != failedNodes.count { problems.append("a graph node sits twice in the failed area") }
        let indexByID = Dictionary(failedNodes.map { ($0.id, $0.index) }, uniquingKeysWith: { first, _ in first })
        var lost: [Int] = []
        for album in (0..<albums).map(DemoAlbum.init(number:)) {
            for node in album.nodes {
                tally.graphNodes += 1
                let name = AlbumGraph.name(of: node.index)
                let prerequisiteFailed = node.prerequisites.contains { failedByIndex[$0] != nil || contract.skipped.contains($0) }
                if contract.completed.contains(node.index) {
                    tally.graphNodesCompleted += 1
                    // A completed node may crash-loop afterwards: killed before its record was
                    // removed, then in flight at the next kills.
                    if let failure = failedByIndex[node.index], !failure.reason.contains("while its attempt ran alone") {
                        problems.append("\(name) completed but sits in the failed area: \(failure.reason)")
                    }
                } else if let failure = failedByIndex[node.index] {
                    if let prerequisite = failure.failedPrerequisite {
                        tally.graphNodesFailedWithPrerequisite += 1
                        guard let index = indexByID[prerequisite], node.prerequisites.contains(index) else {
                            problems.append("\(name) failed naming prerequisite \(prerequisite), which is not one of its prerequisites in the failed area")
                            continue
                        }
                    } else if failure.reason.contains("while its attempt ran alone") {
                        tally.crashLoopedOthers += 1
                    } else if failure.behaviour == .refused {
                        tally.refused += 1
                    } else {
                        problems.append("\(name) (\(failure.behaviour)) failed for good: \(failure.reason)")
                    }
                } else if contract.skipped.contains(node.index) && !contract.stored.contains(node.index) {
                    tally.graphNodesNotAdded += 1
                    if !prerequisiteFailed { problems.append("\(name) was not added, but none of its prerequisites failed") }
                } else if contract.stored.contains(node.index) {
                    lost.append(node.index)
                } else {
                    problems.append("\(name) was never added")
                }
            }
        }
        if !lost.isEmpty { problems.append("graph nodes lost (stored, never completed, not in the failed area): \(lost.prefix(20).map(AlbumGraph.name(of:)))") }
        tally.lost += lost.count
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
