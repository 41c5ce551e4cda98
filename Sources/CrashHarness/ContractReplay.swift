import Foundation

/// The ordering rules of the at-least-once contract, checked by replaying an effects journal
/// from the start; shared by the demo's tally, the crash soak's verifier and the child-process tests.
///
/// Broken rules: an upload that started again after its record was removed, a retry count
/// that went down, an attempt number that did not go up, an upload completed twice within one
/// launch. Allowed, and counted in ``ranTwice``: an upload completed in two launches, because
/// a kill came after its work but before its record was removed.
///
/// Graph rules (for uploads journaled with `add I after=P,Q batch=B`):
/// - no attempt of a dependent starts before the success (`done`) of each of its
///   prerequisites was journaled, in this launch or an earlier one (``startsBeforePrerequisites``);
/// - a batch is restored whole or not at all: once a launch's `failed-area` line shows what
///   its `restore()` found, every member of a batch that was stored (acknowledged, started or
///   restored before, or restored or failed now) is restored, in the failed area, or
///   completed earlier — none is missing (``partlyRestoredBatches``).
package struct ContractReplay {
    /// Broken rules, for people; empty when the contract held.
    package private(set) var violations: [String] = []
    /// Uploads that completed in two (or more) launches.
    package private(set) var ranTwice: [Int] = []
    /// The number of `launch` events seen so far.
    package private(set) var launches = 0
    /// Attempts that started before each of their prerequisites' success was journaled.
    package private(set) var startsBeforePrerequisites = 0
    /// Restores (a launch and a batch) that found part of a stored batch missing.
    package private(set) var partlyRestoredBatches = 0
    /// The prerequisites of each upload journaled with an `add` (or `ack … after=`) line.
    package private(set) var prerequisites: [Int: [Int]] = [:]
    /// The members of each batch, from the `add … batch=B` lines.
    package private(set) var batches: [String: Set<Int>] = [:]
    /// Uploads known to be stored durably: acknowledged, restored, or started.
    package private(set) var stored = Set<Int>()
    /// Uploads whose success was journaled (`done`).
    package private(set) var completed = Set<Int>()
    /// Uploads the app did not add because a prerequisite had failed.
    package private(set) var skipped = Set<Int>()

    /// A replay of an empty journal.
    package init() {}

    private var indexByID: [String: Int] = [:]
    private var removed = Set<Int>()
    private var lastRetries: [Int: Int] = [:]
    private var lastAttempt: [Int: Int] = [:]
    private var completedInLaunch: [Int: Int] = [:]
    private var batchOf: [Int: String] = [:]
    /// Batches of which some member was stored, as far as the journal has shown so far.
    private var storedBatches = Set<String>()
    private var restoredInLaunch = Set<Int>()

    /// Applies the rules to the next event of the journal.
    package mutating func observe(_ event: JournalEvent) {
        switch event {
        case .launch:
            launches += 1
            restoredInLaunch = []
        case .adding(let index, let after, let batch):
            prerequisites[index] = after
            if let batch {
                batches[batch, default: []].insert(index)
                batchOf[index] = batch
            }
        case .acknowledged(let index, let id, let after):
            indexByID[id] = index
            if !after.isEmpty { prerequisites[index] = after }
            noteStored(index)
        case .restored(let index, let id):
            indexByID[id] = index
            restoredInLaunch.insert(index)
            noteStored(index)
        case .failedArea(let indices):
            checkBatchesRestoredWhole(failed: Set(indices))
        case .skipped(let index, _):
            skipped.insert(index)
        case .removed(let id):
            if let index = indexByID[id] { removed.insert(index) }
        case .started(let index, let attempt, let retries):
            noteStored(index)
            if removed.contains(index) {
                violations.append("\(AlbumGraph.name(of: index)) started again after it completed and its record was removed")
            }
            if retries < lastRetries[index, default: 0] {
                violations.append("the retry count of \(AlbumGraph.name(of: index)) went down to \(retries)")
            }
            if attempt <= lastAttempt[index, default: 0] {
                violations.append("the attempt number of \(AlbumGraph.name(of: index)) did not increase (\(attempt))")
            }
            checkPrerequisitesSucceeded(index, attempt: attempt)
            lastRetries[index] = retries
            lastAttempt[index] = attempt
        case .done(let index):
            if let earlier = completedInLaunch[index] {
                if earlier == launches {
                    violations.append("\(AlbumGraph.name(of: index)) completed twice in launch \(launches)")
                } else if !ranTwice.contains(index) {
                    ranTwice.append(index)
                }
            }
            completedInLaunch[index] = launches
            completed.insert(index)
        case .retry, .failed, .movedToFailed, .abandoned, .finished, .handlesSignals, .terminating, .shutDown, .unknown:
            break
        }
    }

    private mutating func noteStored(_ index: Int) {
        stored.insert(index)
        if let batch = batchOf[index] { storedBatches.insert(batch) }
    }

    /// The graph rule: each prerequisite's success was journaled before this attempt started.
    private mutating func checkPrerequisitesSucceeded(_ index: Int, attempt: Int) {
        guard let after = prerequisites[index] else {
            if AlbumGraph.node(of: index) != nil {
                startsBeforePrerequisites += 1
                violations.append("\(AlbumGraph.name(of: index)) started (attempt \(attempt), launch \(launches)) but its add, with its prerequisites, was never journaled")
            }
            return
        }
        let missing = after.filter { !completed.contains($0) }
        guard !missing.isEmpty else { return }
        startsBeforePrerequisites += 1
        let names = missing.map(AlbumGraph.name(of:)).joined(separator: ", ")
        let which = missing.count == 1 ? "its prerequisite" : "its prerequisites"
        violations.append("\(AlbumGraph.name(of: index)) started (attempt \(attempt), launch \(launches)) before the success of \(which) \(names) was journaled")
    }

    /// The batch rule, once a launch has journaled everything its `restore()` found.
    private mutating func checkBatchesRestoredWhole(failed: Set<Int>) {
        let present = restoredInLaunch.union(failed)
        for (batch, members) in batches.sorted(by: { $0.key < $1.key }) {
            guard storedBatches.contains(batch) || !members.isDisjoint(with: present) else { continue }
            storedBatches.insert(batch)
            let missing = members.subtracting(present).subtracting(completed)
            guard !missing.isEmpty else { continue }
            partlyRestoredBatches += 1
            let names = missing.sorted().map(AlbumGraph.name(of:)).joined(separator: ", ")
            violations.append("batch \(batch) was restored in part in launch \(launches): \(names) neither restored, in the failed area, nor completed before")
        }
    }
}
