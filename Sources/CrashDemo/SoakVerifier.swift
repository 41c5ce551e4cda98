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

    let lines: [[Substring]]
    let count: Int
    let store: URL
    let failed: [FailedUpload]
    private(set) var problems: [String] = []
    private(set) var tally = Tally()

    init(effects: String, store: URL, count: Int) throws {
        lines = try String(contentsOfFile: effects, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
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

    private func indices(_ kind: Substring) -> [Int] {
        lines.filter { $0.first == kind && $0.count >= 2 }.compactMap { Int($0[1]) }
    }

    private func value(_ words: [Substring], _ key: String) -> Int? {
        words.lazy.compactMap { $0.hasPrefix(key + "=") ? Int($0.dropFirst(key.count + 1)) : nil }.first
    }

    private mutating func checkOutcomes() {
        // Events of the last operations may be journaled just after `finished`.
        let lastLaunch = lines.lastIndex { $0.first == "launch" } ?? lines.endIndex
        if !lines[lastLaunch...].contains(["finished"]) { problems.append("the last launch did not finish") }
        let launches = lines.filter { $0.first == "launch" }
        tally.launches = launches.count
        tally.quarantined = launches.compactMap { value($0, "quarantined") }.reduce(0, +)
        if tally.quarantined > 0 { problems.append("\(tally.quarantined) entries were quarantined: a kill left a damaged record") }

        let acknowledged = Set(indices("ack"))
        let done = Set(indices("done"))
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
        var indexByID: [Substring: Int] = [:]
        for words in lines where (words.first == "ack" || words.first == "restored") && words.count == 3 {
            indexByID[words[2].dropFirst(3)] = Int(words[1])
        }
        var removed = Set<Int>()
        var lastRetries: [Int: Int] = [:]
        var lastAttempt: [Int: Int] = [:]
        var completedInLaunch: [Int: Int] = [:]
        var ranTwice = Set<Int>()
        var launch = 0
        for words in lines {
            switch words.first {
            case "launch":
                launch += 1
            case "removed":
                if words.count >= 2, let index = indexByID[words[1]] { removed.insert(index) }
            case "start":
                guard words.count >= 2, let index = Int(words[1]) else { continue }
                if removed.contains(index) { problems.append("upload \(index) started again after its record was removed") }
                let retries = value(words, "retries") ?? -1
                let attempt = value(words, "attempt") ?? -1
                if retries < lastRetries[index, default: 0] { problems.append("the retry count of upload \(index) went down to \(retries)") }
                if attempt <= lastAttempt[index, default: 0] { problems.append("the attempt number of upload \(index) did not go up (\(attempt))") }
                lastRetries[index] = retries
                lastAttempt[index] = attempt
            case "done":
                guard words.count >= 2, let index = Int(words[1]) else { continue }
                if let earlier = completedInLaunch[index] {
                    if earlier == launch { problems.append("upload \(index) completed twice in one launch") }
                    ranTwice.insert(index)
                }
                completedInLaunch[index] = launch
            default:
                break
            }
        }
        tally.ranTwice = ranTwice.count
    }

    private mutating func checkStore() {
        var leftovers: [String] = []
        for area in ["pending", "failed", "quarantine", "attempts"] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: store.appendingPathComponent(area).path)) ?? []
            leftovers += names.filter { $0.hasPrefix(".") && $0.hasSuffix(".tmp") }.map { "\(area)/\($0)" }
            if area == "pending" { tally.pendingAtEnd = names.count }
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
