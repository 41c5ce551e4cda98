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
///
/// And for the albums' graph nodes (``DemoAlbum``), with ``ContractReplay``'s graph rules: no
/// attempt started before each of its prerequisites' success was journaled, no launch restored
/// part of a batch; a node fails only if it is refused or a prerequisite failed (it then sits
/// in the failed area naming that prerequisite, or was never added: `skip`).
struct DemoTally {
    /// What happened to one upload or graph node.
    struct Upload {
        var index: Int
        var launches = Set<Int>()
        var attempts = 0
        var countedRetries = 0
        var uncountedRetries = 0
        var completions = 0
        var failureReason: String?
        /// The prerequisite whose failure failed this node, if that is why it failed.
        var failedPrerequisite: Int?
        /// The app did not add this node because a prerequisite had failed.
        var wasSkipped = false

        var isCompleted: Bool { completions > 0 }
        var isFailed: Bool { !isCompleted && (failureReason != nil || wasSkipped) }

        var result: String {
            if completions > 0 { return "completed" }
            if let failedPrerequisite { return "failed: prerequisite \(AlbumGraph.name(of: failedPrerequisite)) failed" }
            if let failureReason { return "failed: \(failureReason)" }
            if wasSkipped { return "not added: a prerequisite failed" }
            return "LOST"
        }

        /// The reason grouped in the tally's `failed` row.
        var failureGroup: String {
            if failedPrerequisite != nil { return "its prerequisite failed for good" }
            if let failureReason { return failureReason }
            return "not added: its prerequisite had failed"
        }
    }

    private(set) var uploads: [Upload]
    /// The albums' graph nodes, album by album, prerequisites first.
    private(set) var graphNodes: [Upload]
    /// Broken rules, for people; empty when the contract held.
    private(set) var violations: [String] = []
    /// Uploads that completed in two launches.
    private(set) var ranTwice: [Int] = []
    /// Attempts that started before their prerequisites' success was journaled.
    private(set) var startsBeforePrerequisites = 0
    /// Launches that restored part of a batch.
    private(set) var partlyRestoredBatches = 0
    /// Records still pending, and entries the read-only store could not use.
    private(set) var pendingLeft = 0
    private(set) var unreadableEntries: [String] = []
    private(set) var launches = 0

    private var all: [Upload] { uploads + graphNodes }
    var completed: [Upload] { all.filter(\.isCompleted) }
    var failed: [Upload] { all.filter(\.isFailed) }
    var lost: [Upload] { all.filter { !$0.isCompleted && !$0.isFailed } }
    /// Whether nothing was lost, no completed upload started again, and the graph rules held.
    var isSuccessful: Bool { lost.isEmpty && violations.isEmpty && pendingLeft == 0 }

    /// Reads the journal at `journal` and the store at `store` for a run of `count` uploads
    /// and `albums` albums.
    init(journal: String, store: URL, count: Int, albums: Int = 0) throws {
        uploads = (0..<count).map { Upload(index: $0) }
        graphNodes = (0..<albums).flatMap { DemoAlbum(number: $0).nodes.map { Upload(index: $0.index) } }
        let events = try JournalTail.allEvents(at: journal)
        // Queue events are delivered asynchronously, so a `removed` line may follow `finished`.
        let lastLaunch = events.lastIndex { if case .launch = $0 { true } else { false } } ?? 0
        if !events[lastLaunch...].contains(.finished) {
            violations.append("the app's last launch did not write its `finished` line")
        }
        try readStore(store)
        replay(events)
        checkGraphFailures()
    }

    private mutating func withUpload(_ index: Int, _ body: (inout Upload) -> Void) -> Bool {
        if uploads.indices.contains(index) {
            body(&uploads[index])
            return true
        }
        if let position = graphNodes.firstIndex(where: { $0.index == index }) {
            body(&graphNodes[position])
            return true
        }
        return false
    }

    private mutating func readStore(_ store: URL) throws {
        let reader = try RecordStore(directory: store, access: .readOnly)
        let pending = try reader.loadPending()
        pendingLeft = pending.records.count
        let failed = try reader.loadFailed()
        unreadableEntries = (pending.skipped + failed.skipped).map { "\($0.name): \($0.reason)" }
        var indexByID: [String: Int] = [:]
        var failedPrerequisites: [(index: Int, prerequisite: String)] = []
        for record in failed.records {
            guard let job = try? RecordFormat.decodePayload(UploadJob.self, from: record.payload),
                  withUpload(job.index, { $0.failureReason = record.failureReason ?? "no reason recorded" })
            else {
                unreadableEntries.append("\(record.id): a failed record that is not one of this run's uploads")
                continue
            }
            indexByID[record.id] = job.index
            if let prerequisite = record.failedPrerequisite { failedPrerequisites.append((job.index, prerequisite)) }
        }
        for (index, prerequisite) in failedPrerequisites {
            guard let prerequisiteIndex = indexByID[prerequisite] else {
                violations.append("\(AlbumGraph.name(of: index)) failed naming prerequisite \(prerequisite), which is not in the failed area")
                continue
            }
            _ = withUpload(index) { $0.failedPrerequisite = prerequisiteIndex }
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
        for event in events {
            contract.observe(event)
            switch event {
            case .started(let index, _, _):
                let launch = contract.launches
                _ = withUpload(index) { $0.attempts += 1; $0.launches.insert(launch) }
            case .retry(let index, let counted):
                _ = withUpload(index) { if counted { $0.countedRetries += 1 } else { $0.uncountedRetries += 1 } }
            case .done(let index):
                _ = withUpload(index) { $0.completions += 1 }
            case .skipped(let index, _):
                _ = withUpload(index) { $0.wasSkipped = true }
            default:
                break
            }
        }
        launches = contract.launches
        ranTwice = contract.ranTwice
        startsBeforePrerequisites = contract.startsBeforePrerequisites
        partlyRestoredBatches = contract.partlyRestoredBatches
        violations += contract.violations
    }

    /// A graph node fails only when it is refused, or because a prerequisite failed.
    private mutating func checkGraphFailures() {
        let failedIndices = Set(graphNodes.filter(\.isFailed).map(\.index))
        for node in graphNodes where node.isFailed {
            guard let (album, role) = AlbumGraph.node(of: node.index) else { continue }
            let refused = DemoAlbum(number: album).behaviour(of: role) == .refused
            let prerequisites = AlbumGraph.prerequisites(album: album, role: role)
            if node.wasSkipped || node.failedPrerequisite != nil {
                if !prerequisites.contains(where: failedIndices.contains) {
                    violations.append("\(AlbumGraph.name(of: node.index)) failed with a prerequisite, but none of its prerequisites failed")
                }
            } else if !refused {
                violations.append("\(AlbumGraph.name(of: node.index)) failed for good: \(node.failureReason ?? "")")
            }
        }
    }
}
