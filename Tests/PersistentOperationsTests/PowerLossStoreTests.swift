import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The record store (the queue's store layer, on the journal) under power cuts: a seeded
/// workload of adds, updates, removals, moves to the failed area and batches runs on a
/// ``PowerLossFileSystem`` with
/// cuts armed before random calls; each cut file system is opened as a store again and
/// checked: every acknowledged change is there, and nothing else but the change in flight (or
/// a removal undone, which at-least-once allows). One seed per model: the journal's own
/// suite (`JournalPowerLossTests`) runs more workloads, compaction included.
@Suite("Record store under power cuts", .serialized, .timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct PowerLossStoreTests {
    /// Cuts per workload: fewer under Thread Sanitizer, which looks for races, not lost records.
    static let cutsPerSeed = isRunningUnderThreadSanitizer ? 40 : 240

    static let directory = URL(fileURLWithPath: "/data/store")

    /// Where a record is, as far as a restore is concerned.
    enum Place: Equatable, CustomStringConvertible {
        case absent
        case pending(OperationRecord)
        case failed(OperationRecord)

        var description: String {
            switch self {
            case .absent: "absent"
            case .pending(let record): "pending (retries \(record.numberOfRetries))"
            case .failed(let record): "failed (retries \(record.numberOfRetries))"
            }
        }
    }

    /// One store call of the workload: the calls it made through the file system, and where
    /// each record it touched was before and after.
    struct Step {
        var name: String
        var firstCall: Int
        var lastCall: Int
        var before: [String: Place]
        var after: [String: Place]
        /// A batch's records count only together; `nil` for other steps.
        var batchID: String?
    }

    /// Runs the seeded workload on `disk` and returns its steps.
    /// `calls` is the file system the store calls (by default the disk's own).
    static func runWorkload(on disk: PowerLossFileSystem, calls: FileSystem? = nil, seed: UInt64, steps count: Int) throws -> [Step] {
        var random = SeededGenerator(seed: seed)
        let store = try RecordStore(directory: directory, configuration: .init(fileSystem: calls ?? disk.fileSystem))
        var places: [String: Place] = [:]
        var steps: [Step] = []
        var index = 0
        func run(_ name: String, touching ids: [String], batchID: String? = nil, _ body: () throws -> [String: Place]) throws {
            let firstCall = disk.callCount + 1
            let before = Dictionary(uniqueKeysWithValues: ids.map { ($0, places[$0] ?? .absent) })
            let after = try body()
            places.merge(after) { $1 }
            steps.append(Step(name: name, firstCall: firstCall, lastCall: disk.callCount, before: before, after: after, batchID: batchID))
        }
        for _ in 0..<count {
            index += 1
            let live = places.filter { if case .pending = $0.value { true } else { false } }.keys.sorted()
            let roll = Int.random(in: 0..<100, using: &random)
            if roll < 45 || live.isEmpty {
                let record = try makeRecord(index: index)
                try run("add", touching: [record.id]) {
                    try store.add(record)
                    return [record.id: .pending(record)]
                }
            } else if roll < 65, let id = live.randomElement(using: &random), case .pending(var record)? = places[id] {
                record.numberOfRetries += 1
                try run("update", touching: [id]) {
                    try store.update(record)
                    return [id: .pending(record)]
                }
            } else if roll < 78, let id = live.randomElement(using: &random) {
                try run("remove", touching: [id]) {
                    try store.removePending(id: id)
                    return [id: .absent]
                }
            } else if roll < 88, let id = live.randomElement(using: &random), case .pending(let record)? = places[id] {
                try run("move to failed", touching: [id]) {
                    [id: .failed(try store.moveToFailed(record, reason: "gave up"))]
                }
            } else {
                let batchID = UUID().uuidString
                var records: [OperationRecord] = []
                for _ in 0..<3 {
                    index += 1
                    var record = try makeRecord(index: index)
                    record.batchID = batchID
                    records.append(record)
                }
                try run("batch", touching: records.map(\.id), batchID: batchID) {
                    try store.addBatch(records)
                    return Dictionary(uniqueKeysWithValues: records.map { ($0.id, .pending($0)) })
                }
            }
        }
        store.close()
        return steps
    }

    /// What a restore finds on `disk`: the counted pending records (those of a batch only with
    /// its commit marker) and the failed ones, plus the problems the store reported.
    static func restore(from disk: PowerLossFileSystem) throws -> (places: [String: Place], uncommittedBatchRecords: [String: String], quarantined: [String]) {
        let store = try RecordStore(directory: directory, configuration: .init(fileSystem: disk.fileSystem))
        defer { store.close() }
        let pending = try store.loadPending()
        let failed = try store.loadFailed()
        let batches = try store.committedBatches()
        var places: [String: Place] = [:]
        var uncommitted: [String: String] = [:]
        for record in pending.records {
            if let batchID = record.batchID, let batches, !batches.contains(batchID) {
                uncommitted[record.id] = batchID
            } else {
                places[record.id] = .pending(record)
            }
        }
        // Frames written after the journal's last flush that a cut kept torn, or kept after a
        // later one, are damage the journal reports (and keeps in quarantine); no acknowledged
        // change is among them, which the places checked by the caller show.
        var quarantined = (pending.quarantined + failed.quarantined).filter { !$0.name.contains(".segment@") }.map { "\($0.name): \($0.reason)" }
        for record in failed.records {
            if places[record.id] != nil || uncommitted[record.id] != nil {
                quarantined.append("\(record.id.prefix(8)) is both pending and failed")
            }
            places[record.id] = .failed(record)
        }
        return (places, uncommitted, quarantined)
    }

    @Test(arguments: [0x0022_B10C] as [UInt64])
    func noAcknowledgedChangeIsLostToAPowerCut(workloadSeed: UInt64) async throws {
        // Given a store's workload, with power cuts armed before random calls
        // When each cut is opened as a store again
        let outcome = try await onDedicatedThread { try Self.cutAndRestore(workloadSeed: workloadSeed) }
        // Then each opens, and every record is where the acknowledged steps left it (or the
        // step in flight was taking it, or a removal was undone), and batches count whole
        #expect(outcome.cuts >= Self.cutsPerSeed * 5 / 6)
        #expect(outcome.problems.isEmpty, "\(outcome.problems.prefix(10))")
    }

    @Test(
        arguments: [0x0022_B10C] as [UInt64]
    )
    func noAcknowledgedChangeIsLostWhenRenamesBetweenDirectoriesAreNotAtomic(workloadSeed: UInt64) async throws {
        // Given a file system weaker than journaling ones: a move between directories is two
        // independent changes
        // When the workload runs under power cuts and each cut is opened as a store again
        let outcome = try await onDedicatedThread { try Self.cutAndRestore(workloadSeed: workloadSeed, splitsRenames: true) }
        // Then nothing acknowledged is lost either
        #expect(outcome.cuts >= Self.cutsPerSeed * 5 / 6)
        #expect(outcome.problems.isEmpty, "\(outcome.problems.prefix(10))")
    }

    @Test func theCheckCatchesAStoreThatSkipsDirectorySyncs() async throws {
        // Given a store whose directory syncs do nothing
        // When it runs the workload under power cuts
        let outcome = try await onDedicatedThread { try Self.cutAndRestore(workloadSeed: 0x0022_B10C) { disk in
            var calls = disk.fileSystem
            calls.synchronizeDirectory = { _ in }
            return calls
        } }
        // Then the check reports acknowledged records lost
        #expect(outcome.problems.contains { $0.contains("is absent, expected one of [pending") })
    }

    /// Runs the workload with `workloadSeed` and ``cutsPerSeed`` cuts, restores each cut and returns what
    /// did not match.
    static func cutAndRestore(
        workloadSeed: UInt64, splitsRenames: Bool = false, calls: (PowerLossFileSystem) -> FileSystem = { $0.fileSystem }
    ) throws -> (cuts: Int, problems: [String]) {
        // A dry run gives the workload's length in calls: the same workload makes the same calls.
        let stepCount = 60
        let dryRun = PowerLossFileSystem(splitsRenamesBetweenDirectories: splitsRenames)
        _ = try runWorkload(on: dryRun, calls: calls(dryRun), seed: workloadSeed, steps: stepCount)
        let callCount = dryRun.callCount
        var random = SeededGenerator(seed: workloadSeed ^ 0xC0_7C07)
        let disk = PowerLossFileSystem(splitsRenamesBetweenDirectories: splitsRenames)
        for _ in 0..<Self.cutsPerSeed {
            disk.armCut(beforeCall: Int.random(in: 1...callCount, using: &random), seed: random.next())
        }
        let steps = try runWorkload(on: disk, calls: calls(disk), seed: workloadSeed, steps: stepCount)
        let cuts = disk.cuts
        var problems: [String] = []
        var kept = 0
        var undoneRemovals = 0
        var inFlightKept = 0
        for (call, fileSystem) in cuts {
            // Then the store opens on what the cut left
            let found: (places: [String: Place], uncommittedBatchRecords: [String: String], quarantined: [String])
            do {
                found = try restore(from: fileSystem)
            } catch {
                problems.append("cut before call \(call): the store does not open: \(error)")
                continue
            }
            if !found.quarantined.isEmpty {
                problems.append("cut before call \(call): quarantined or doubled \(found.quarantined)")
            }
            // And every record is where the acknowledged steps left it, or where the step in
            // flight was taking it; a removal may be undone (at-least-once)
            let acknowledged = steps.filter { $0.lastCall < call }
            let inFlight = steps.first { $0.firstCall <= call && $0.lastCall >= call }
            var allowed: [String: [Place]] = [:]
            for step in acknowledged {
                for (id, place) in step.after {
                    allowed[id] = [place]
                    if place == .absent, let before = step.before[id] { allowed[id]!.append(before) }
                }
            }
            if let inFlight {
                for (id, place) in inFlight.after { allowed[id, default: [.absent]].append(place) }
            }
            for id in Set(allowed.keys).union(found.places.keys) {
                let place = found.places[id] ?? .absent
                let choices = allowed[id] ?? [.absent]
                if !choices.contains(place) {
                    let last = steps.last { $0.after[id] != nil && $0.firstCall <= call }
                    problems.append("cut before call \(call): record \(id.prefix(8)) is \(place), expected one of \(choices) (last step touching it: \(last.map { "\($0.name), calls \($0.firstCall)...\($0.lastCall)" } ?? "none"))")
                } else if place != .absent {
                    kept += 1
                }
                if place != .absent, choices.first == .absent { undoneRemovals += 1 }
            }
            // And a batch counts all or none
            if let inFlight, let batchID = inFlight.batchID {
                let counted = inFlight.after.keys.filter { found.places[$0] != nil }
                if !counted.isEmpty, counted.count != inFlight.after.count {
                    problems.append("cut before call \(call): batch \(batchID.prefix(8)) counts \(counted.count) of \(inFlight.after.count) records")
                }
                if counted.count == inFlight.after.count { inFlightKept += 1 }
            } else if let inFlight, inFlight.after.contains(where: { found.places[$0.key] == $0.value && $0.value != .absent && !(inFlight.before[$0.key] == $0.value) }) {
                inFlightKept += 1
            }
        }
        print("power cuts of the record store, workload seed \(workloadSeed): \(cuts.count) cuts in \(callCount) calls, \(steps.count) steps (" + Dictionary(grouping: steps, by: \.name).map { "\($0.key) \($0.value.count)" }.sorted().joined(separator: ", ") + "); records found as expected \(kept), removals undone \(undoneRemovals), changes in flight kept \(inFlightKept)")
        return (cuts.count, problems)
    }
}
