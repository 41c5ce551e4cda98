import CrashHarness
import Foundation
import PersistentOperations

/// The outcome of a demo run, computed from the whole effects journal and the store once the
/// app has finished: what completed, what failed for good, what was lost, what ran twice.
///
/// The rules are those of the at-least-once contract (the crash tests check the same):
/// - an upload is *completed* when the journal shows it done, *failed* when its record is in
///   the failed area, and *lost* otherwise;
/// - *ran twice* counts uploads that completed in two launches, because a kill came after the
///   upload's work but before its record was removed: allowed, that is what at-least-once means;
/// - an attempt that *started again after completion* (after its record was removed), a
///   completion repeated within one launch, or a retry or attempt count that went backwards is
///   a broken contract.
struct DemoTally {
    /// What happened to one upload.
    struct Upload {
        var index: Int
        var launches = Set<Int>()
        var attempts = 0
        var countedRetries = 0
        var uncountedRetries = 0
        var completions = 0
        var failureReason: String?

        var result: String {
            if completions > 0 { return "completed" }
            if let failureReason { return "failed: \(failureReason)" }
            return "LOST"
        }
    }

    private(set) var uploads: [Upload]
    /// Broken rules, for people; empty when the contract held.
    private(set) var violations: [String] = []
    /// Uploads that completed in two launches.
    private(set) var ranTwice: [Int] = []
    /// Records still pending, and entries the read-only store could not use.
    private(set) var pendingLeft = 0
    private(set) var unreadableEntries: [String] = []
    private(set) var launches = 0

    var completed: [Upload] { uploads.filter { $0.completions > 0 } }
    var failed: [Upload] { uploads.filter { $0.completions == 0 && $0.failureReason != nil } }
    var lost: [Upload] { uploads.filter { $0.completions == 0 && $0.failureReason == nil } }
    /// Whether nothing was lost and no completed upload started again.
    var isSuccessful: Bool { lost.isEmpty && violations.isEmpty && pendingLeft == 0 }

    /// Reads the journal at `journal` and the store at `store` for a run of `count` uploads.
    init(journal: String, store: URL, count: Int) throws {
        uploads = (0..<count).map { Upload(index: $0) }
        let events = try JournalTail.allEvents(at: journal)
        // Queue events are delivered asynchronously, so a `removed` line may follow `finished`.
        let lastLaunch = events.lastIndex { if case .launch = $0 { true } else { false } } ?? 0
        if !events[lastLaunch...].contains(.finished) {
            violations.append("the app's last launch did not write its `finished` line")
        }
        try readStore(store, count: count)
        replay(events)
    }

    private mutating func readStore(_ store: URL, count: Int) throws {
        let reader = try RecordStore(directory: store, access: .readOnly)
        let pending = try reader.loadPending()
        pendingLeft = pending.records.count
        let failed = try reader.loadFailed()
        unreadableEntries = (pending.skipped + failed.skipped).map { "\($0.name): \($0.reason)" }
        for record in failed.records {
            guard let job = try? RecordFormat.decodePayload(UploadJob.self, from: record.payload), job.index < count else {
                unreadableEntries.append("\(record.id): a failed record that is not one of this run's uploads")
                continue
            }
            uploads[job.index].failureReason = record.failureReason ?? "no reason recorded"
        }
        if pendingLeft > 0 {
            violations.append("\(pendingLeft) records are still pending after the app finished")
        }
        if !unreadableEntries.isEmpty {
            violations.append("unreadable store entries: \(unreadableEntries.joined(separator: "; "))")
        }
    }

    private mutating func replay(_ events: [JournalEvent]) {
        var contract = ContractReplay()
        func known(_ index: Int) -> Bool { uploads.indices.contains(index) }
        for event in events {
            contract.observe(event)
            switch event {
            case .started(let index, _, _) where known(index):
                uploads[index].attempts += 1
                uploads[index].launches.insert(contract.launches)
            case .retry(let index, let counted) where known(index):
                if counted { uploads[index].countedRetries += 1 } else { uploads[index].uncountedRetries += 1 }
            case .done(let index) where known(index):
                uploads[index].completions += 1
            default:
                break
            }
        }
        launches = contract.launches
        ranTwice = contract.ranTwice
        violations += contract.violations
    }
}
