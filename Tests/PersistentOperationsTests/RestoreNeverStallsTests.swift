import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Whatever records and crash evidence a crash or a power cut left, `restore()` never stalls:
/// stores built record by record (pending and failed records, prerequisites, dates, run
/// conditions, suspect files, attempt markers, launch files) are restored, and every one of
/// them drains.
@Suite("Restore never stalls", .timeLimit(.minutes(3)))
struct RestoreNeverStallsTests {
    /// A store directory filled directly, as an earlier launch may have left it.
    struct BuiltStore {
        let directory: TemporaryDirectory
        let store: RecordStore
        let journal = UUID().uuidString
        private var sequence: UInt64 = 0

        init() throws {
            directory = try TemporaryDirectory()
            store = try RecordStore(directory: directory.store)
        }

        /// A record of a ``ScriptedUpload`` that succeeds (not stored yet).
        mutating func record(
            _ name: String, after prerequisites: [String] = [], notBefore: Date? = nil, conditions: [String] = [],
            expiresAt: Date? = nil, typeIdentifier: String = ScriptedUpload.persistenceIdentifier
        ) throws -> OperationRecord {
            sequence += 1
            return OperationRecord(
                typeIdentifier: typeIdentifier,
                payload: try RecordFormat.encodePayload(UploadPayload(name: name, journal: journal)),
                enqueueSequence: sequence, notBefore: notBefore, prerequisites: prerequisites,
                expiresAt: expiresAt, conditions: conditions
            )
        }

        /// Writes the suspect file a launch that died leaves for `id` (`attempts crashes alone`).
        func writeSuspect(_ text: String, forRecord id: String) throws {
            try Data(text.utf8).write(to: URL(fileURLWithPath: directory.path("attempts", "\(id).suspect")))
        }

        /// Writes the launch file (`nil`: none, as after a power cut that lost it).
        func writeLaunchFile(_ text: String?) throws {
            let path = directory.path("attempts", "launch")
            try? FileManager.default.removeItem(atPath: path)
            if let text { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) }
        }
    }

    /// Waits until `queue` has finished everything, at most `seconds`; whether it did.
    static func drains(_ queue: PersistentOperationQueue, within seconds: Double = 10) async -> Bool {
        await finishes(within: seconds) { await queue.allOperationsFinished() }
    }

    /// Like ``drains(_:within:)`` for a queue on a test clock that was moved past every date:
    /// what becomes due only after the move (a dependent whose dated prerequisite ended later)
    /// is timed at once, which a test clock runs at its next move, so it is moved by nothing
    /// every 20 ms meanwhile.
    static func drains(_ queue: PersistentOperationQueue, clock: ManualRetryScheduler, within seconds: Double = 10) async -> Bool {
        let ticking = Task {
            while !Task.isCancelled {
                clock.advance(by: 0)
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        defer { ticking.cancel() }
        return await drains(queue, within: seconds)
    }

    /// What the queue still tracks, for a failure message.
    static func leftovers(_ queue: PersistentOperationQueue, names: [String: String]) -> String {
        queue.operations().map { "\(names[$0.id.rawValue] ?? $0.id.rawValue): \($0.state)" }.sorted().joined(separator: ", ")
    }

    /// The operations that ran alone, by name, in order.
    static func ranAlone(_ fixture: QueueFixture, names: [String: String]) -> [String] {
        fixture.deliveredEvents().compactMap { event in
            if case .runningAlone(let id, _) = event { return names[id.rawValue] ?? "?" }
            return nil
        }
    }

    @Test func aSuspectThatRunsAloneBlockedOnAPendingPrerequisiteLetsThePrerequisiteRun() async throws {
        // Given a power cut's store: a batch whose prerequisite P is still pending (its removal,
        // not synced, was lost) and whose dependent D left an attempt marker, so D runs alone
        var built = try BuiltStore()
        let batch = UUID().uuidString
        var prerequisite = try built.record("P")
        var dependent = try built.record("D", after: [prerequisite.id])
        prerequisite.batchID = batch
        dependent.batchID = batch
        try built.store.addBatch([prerequisite, dependent])
        try built.writeSuspect("1 0 1", forRecord: dependent.id)
        built.store.close()
        let names = [prerequisite.id: "P", dependent.id: "D"]
        // When the next launch restores it
        let fixture = try QueueFixture(maxConcurrent: 2, directory: built.directory, journal: built.journal)
        let report = try fixture.queue.restore()
        #expect(report.runAlone.map(\.rawValue) == [dependent.id])
        // Then the prerequisite runs, then the dependent, alone; the store drains
        let drained = await Self.drains(fixture.queue)
        #expect(drained, "restore stalled: \(Self.leftovers(fixture.queue, names: names))")
        #expect(fixture.lines == ["P#1 retry=false retries=0", "D#2 retry=true retries=0"])
        #expect(Self.ranAlone(fixture, names: names) == ["D"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aSuspectThatRunsAloneWaitingForItsNotBeforeDateDoesNotHoldBackTheOthers() async throws {
        // Given two suspects that run alone, the first (crashes on file; last in run order)
        // not due for an hour, and two other records due now
        var built = try BuiltStore()
        let alone = try built.record("alone")
        let others = [try built.record("a"), try built.record("b")]
        let later = try built.record("later", notBefore: Date(timeIntervalSinceReferenceDate: 3_600))
        for record in [alone] + others + [later] { try built.store.add(record) }
        try built.writeSuspect("1 1 1", forRecord: later.id)
        try built.writeSuspect("1 0 1", forRecord: alone.id)
        built.store.close()
        let names = [later.id: "later", alone.id: "alone", others[0].id: "a", others[1].id: "b"]
        // When the next launch restores it
        let fixture = try QueueFixture(maxConcurrent: 2, directory: built.directory, journal: built.journal)
        let report = try fixture.queue.restore()
        #expect(report.runAlone.map { names[$0.rawValue] } == ["later", "alone"])
        // Then everything due runs while the first waits for its date
        let ranTheRest = try await eventually { fixture.lines.count == 3 }
        #expect(ranTheRest, "the others waited for a date: \(Self.leftovers(fixture.queue, names: names))")
        #expect(fixture.lines.first == "alone#2 retry=true retries=0")
        // And, once due, it still runs alone
        fixture.clock.advance(by: 3_600)
        let drained = await Self.drains(fixture.queue)
        #expect(drained, "restore stalled: \(Self.leftovers(fixture.queue, names: names))")
        #expect(fixture.lines.last == "later#2 retry=true retries=0")
        #expect(Self.ranAlone(fixture, names: names) == ["alone", "later"])
    }

    @Test func recordsWhosePrerequisitesFormACycleFailInsteadOfWaitingForever() async throws {
        // Given a store written by hand: A and B wait for each other, C for itself, D for A,
        // and E for nothing
        var built = try BuiltStore()
        var a = try built.record("A")
        let b = try built.record("B", after: [a.id])
        a.prerequisites = [b.id]
        var c = try built.record("C")
        c.prerequisites = [c.id]
        let d = try built.record("D", after: [a.id])
        let e = try built.record("E")
        for record in [a, b, c, d, e] { try built.store.add(record) }
        built.store.close()
        let names = [a.id: "A", b.id: "B", c.id: "C", d.id: "D", e.id: "E"]
        // When it is restored
        let fixture = try QueueFixture(maxConcurrent: 2, directory: built.directory, journal: built.journal)
        let report = try fixture.queue.restore()
        let drained = await Self.drains(fixture.queue)
        // Then the queue drains: the records of the cycles, and what waits for them, fail;
        // the others run
        #expect(drained, "restore stalled: \(Self.leftovers(fixture.queue, names: names))")
        #expect(fixture.lines == ["E#1 retry=false retries=0"])
        #expect(Set(report.failedWithTheirPrerequisites.compactMap { names[$0.rawValue] }) == ["A", "B", "C", "D"])
        let failed = Dictionary(uniqueKeysWithValues: try fixture.queue.failedOperations().map { ($0.id.rawValue, $0) })
        #expect(failed[a.id]?.reason.contains("form a cycle") == true)
        #expect(failed[c.id]?.failedPrerequisite == nil)
        #expect(failed[d.id]?.failedPrerequisite?.rawValue == a.id)
        // And re-queueing them fails them again, without looping
        fixture.queue.isSuspended = true
        try fixture.queue.retryFailedOperation(withID: PersistentOperationID(record: a.id))
        try fixture.queue.retryAllFailedOperations()
        fixture.queue.isSuspended = false
        let drainedAgain = await Self.drains(fixture.queue)
        #expect(drainedAgain, "re-queueing stalled: \(Self.leftovers(fixture.queue, names: names))")
        #expect(Set(try fixture.queue.failedOperations().map(\.id.rawValue)) == [a.id, b.id, c.id, d.id])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aRecordThatWaitsForAPeriodicSeriesFailsInsteadOfWaitingForever() async throws {
        // Given a store written by hand: a periodic series, and a record that names it as its
        // prerequisite (the queue refuses that dependency)
        var built = try BuiltStore()
        var series = try built.record("series")
        series.repeatInterval = 60
        series.periodTarget = Date(timeIntervalSinceReferenceDate: 0)
        let dependent = try built.record("dependent", after: [series.id])
        for record in [series, dependent] { try built.store.add(record) }
        built.store.close()
        let names = [series.id: "series", dependent.id: "dependent"]
        // When it is restored
        let fixture = try QueueFixture(directory: built.directory, journal: built.journal)
        let report = try fixture.queue.restore()
        let drained = await Self.drains(fixture.queue)
        // Then the dependent fails, naming the series, and the series goes on
        #expect(drained, "restore stalled: \(Self.leftovers(fixture.queue, names: names))")
        #expect(report.failedWithTheirPrerequisites.map(\.rawValue) == [dependent.id])
        let failed = try fixture.queue.failedOperations()
        #expect(failed.map(\.id.rawValue) == [dependent.id])
        #expect(failed.first?.failedPrerequisite?.rawValue == series.id)
        #expect(failed.first?.reason.contains("is periodic") == true)
        #expect(fixture.lines == ["series#1 retry=false retries=0"])
    }

    // MARK: Random stores

    /// One record of a generated store.
    struct Node: CustomStringConvertible {
        enum Area: String { case pending, failed, gone, unregistered }
        var name: String
        var area: Area
        var prerequisites: [Int] = []
        var goneCount = 0
        var isDated = false
        var isConditioned = false
        var isExpired = false
        var suspect: String?
        var marker: Int?

        var description: String {
            var parts = ["\(name) \(area.rawValue)"]
            if !prerequisites.isEmpty { parts.append("after \(prerequisites.map { "n\($0)" }.joined(separator: ","))") }
            if goneCount > 0 { parts.append("+\(goneCount) gone") }
            if isDated { parts.append("dated") }
            if isConditioned { parts.append("conditioned") }
            if isExpired { parts.append("expired") }
            if let suspect { parts.append("suspect '\(suspect)'") }
            if let marker { parts.append("marker \(marker)") }
            return parts.joined(separator: " ")
        }
    }

    /// A generated store: records, evidence and the queue's width.
    struct Shape: CustomStringConvertible {
        var nodes: [Node] = []
        var launchFile: String?
        var isBatch = false
        var maxConcurrent = 1
        /// Operations the launch adds before `restore()` (they hold slots while it restores) and after.
        var addsBefore = 0
        var addsAfter = 0

        var description: String {
            "width \(maxConcurrent)\(isBatch ? ", one batch" : ""), \(addsBefore) added before restore, \(addsAfter) after, launch file \(launchFile.map { "'\($0.replacingOccurrences(of: "\n", with: "|"))'" } ?? "none"): "
                + nodes.map(\.description).joined(separator: "; ")
        }

        static func random(using random: inout SeededGenerator) -> Shape {
            var shape = Shape()
            shape.maxConcurrent = Int.random(in: 1...3, using: &random)
            shape.isBatch = Int.random(in: 0..<10, using: &random) < 3
            shape.addsBefore = Int.random(in: 0..<10, using: &random) < 2 ? Int.random(in: 1...3, using: &random) : 0
            shape.addsAfter = Int.random(in: 0..<10, using: &random) < 2 ? Int.random(in: 1...3, using: &random) : 0
            shape.launchFile = ["witness on\n", "witness on\ncrashed 11\n", "witness off\n", nil].randomElement(using: &random)!
            let suspects = ["1 0 1", "1 0 0", "0 0 1", "2 1 1", "1 2 1", "1 3 1", "garbage"]
            let count = Int.random(in: 2...7, using: &random)
            for index in 0..<count {
                let roll = Int.random(in: 0..<100, using: &random)
                var node = Node(name: "n\(index)", area: roll < 8 ? .failed : roll < 14 ? .gone : roll < 18 ? .unregistered : .pending)
                node.prerequisites = (0..<index).filter { _ in Int.random(in: 0..<100, using: &random) < 40 }
                if Int.random(in: 0..<100, using: &random) < 5 {
                    // A store written by hand or damaged: a prerequisite that may close a cycle.
                    node.prerequisites.append(Int.random(in: index..<count, using: &random))
                }
                node.goneCount = Int.random(in: 0..<100, using: &random) < 15 ? 1 : 0
                if node.area == .pending {
                    node.isDated = Int.random(in: 0..<100, using: &random) < 15
                    node.isConditioned = Int.random(in: 0..<100, using: &random) < 15
                    node.isExpired = Int.random(in: 0..<100, using: &random) < 5
                    switch Int.random(in: 0..<100, using: &random) {
                    case 0..<45: node.suspect = suspects.randomElement(using: &random)
                    case 45..<60: node.marker = Int.random(in: 1...2, using: &random)
                    default: break
                    }
                }
                shape.nodes.append(node)
            }
            return shape
        }

        /// Writes the store; returns the records' identifiers by node.
        func build(into built: inout BuiltStore) throws -> [String] {
            let ids = nodes.map { _ in UUID().uuidString }
            var batch: [OperationRecord] = []
            let batchID = UUID().uuidString
            for (index, node) in nodes.enumerated() {
                var record = try built.record(
                    node.name,
                    after: node.prerequisites.map { ids[$0] } + (0..<node.goneCount).map { _ in UUID().uuidString },
                    notBefore: node.isDated ? Date(timeIntervalSinceReferenceDate: 3_600) : nil,
                    conditions: node.isConditioned ? ["network"] : [],
                    expiresAt: node.isExpired ? Date(timeIntervalSinceReferenceDate: -1) : nil,
                    typeIdentifier: node.area == .unregistered ? "test.not-registered" : ScriptedUpload.persistenceIdentifier
                )
                record.id = ids[index]
                switch node.area {
                case .gone:
                    continue
                case .failed:
                    try built.store.add(record)
                    _ = try built.store.moveToFailed(record, reason: "refused")
                case .pending, .unregistered:
                    if isBatch {
                        record.batchID = batchID
                        batch.append(record)
                    } else {
                        try built.store.add(record)
                    }
                }
            }
            if !batch.isEmpty { try built.store.addBatch(batch) }
            for (index, node) in nodes.enumerated() {
                if let suspect = node.suspect { try built.writeSuspect(suspect, forRecord: ids[index]) }
                if let marker = node.marker { try built.store.setAttemptsInFlight(marker, forRecord: ids[index]) }
            }
            try built.writeLaunchFile(launchFile)
            return ids
        }
    }

    @Test func randomStoresOfRecordsAndCrashEvidenceAlwaysDrain() async throws {
        // Given hundreds of seeded random stores: graphs of pending records whose prerequisites
        // are pending, gone (succeeded), failed, expired or of an unregistered type, a few with
        // cycles (a store written by hand or damaged); records with
        // not-before dates and run conditions; random suspect files, attempt markers and launch
        // files (the removals a power cut lost are the pending prerequisites of suspects);
        // queues of 1 to 3 slots, some with operations added before and after the restore
        let count = isRunningUnderThreadSanitizer ? 40 : 300
        var random = SeededGenerator(seed: 0x57A1_1F8E)
        for storeIndex in 0..<count {
            let shape = Shape.random(using: &random)
            var built = try BuiltStore()
            let ids = try shape.build(into: &built)
            built.store.close()
            let names = Dictionary(uniqueKeysWithValues: zip(ids, shape.nodes.map(\.name)))
            let label = "store \(storeIndex) (\(shape))"

            // When a launch restores it, its run condition not holding and the clock before the dates
            let fixture = try QueueFixture(maxConcurrent: shape.maxConcurrent, directory: built.directory, journal: built.journal)
            let network = ManualRunCondition(isSatisfied: false)
            fixture.queue.register(network, as: "network")
            var added: [String] = []
            for index in 0..<shape.addsBefore {
                added.append(try fixture.queue.addOperation(fixture.upload("before\(index)"), options: EnqueueOptions()).id.rawValue)
            }
            let report = try fixture.queue.restore()
            for index in 0..<shape.addsAfter {
                added.append(try fixture.queue.addOperation(fixture.upload("after\(index)"), options: EnqueueOptions()).id.rawValue)
            }

            // Then everything that waits for no date and no condition ends without them
            let early = Set(Self.endingEarly(shape).map { ids[$0] } + added)
            let endedEarly = try await eventually { early.isSubset(of: Self.ended(fixture)) }
            #expect(endedEarly, "\(label): stalled before its dates and conditions: \(Self.leftovers(fixture.queue, names: names))")
            // And once the condition holds and the dates pass, everything drains
            network.isSatisfied = true
            fixture.clock.advance(by: 7_200)
            let drained = await Self.drains(fixture.queue, clock: fixture.clock)
            #expect(drained, "\(label): restore stalled: \(Self.leftovers(fixture.queue, names: names))")
            // No attempt started before each of its pending prerequisites succeeded
            let events = fixture.deliveredEvents()
            for (index, node) in shape.nodes.enumerated() {
                guard let start = events.firstIndex(where: { if case .started(let id, _) = $0 { id.rawValue == ids[index] } else { false } }) else { continue }
                for prerequisite in node.prerequisites where [.pending, .failed, .unregistered].contains(shape.nodes[prerequisite].area) {
                    let success = events.firstIndex(of: .succeeded(PersistentOperationID(record: ids[prerequisite]))) ?? .max
                    #expect(success < start, "\(label): \(node.name) started before \(shape.nodes[prerequisite].name) succeeded")
                }
            }
            // And only what cannot be run in this launch (an unregistered type, and what waits for it) is left pending
            let held = Set((report.unknownTypes.map(\.id) + report.heldForUnavailablePrerequisites).map(\.rawValue))
            #expect(Set(try fixture.pendingRecords().map(\.id)) == held, "\(label)")
            fixture.queue.close()
            if !(endedEarly && drained) { break }
        }
    }

    /// The records that end (run, or fail with a prerequisite) before any date passes or any
    /// run condition holds: what needs neither, directly or through a prerequisite.
    static func endingEarly(_ shape: Shape) -> [Int] {
        let nodes = shape.nodes
        // The records restore tracks (it fails the expired and crash-looped ones first).
        let restored = nodes.map { $0.area == .pending && !$0.isExpired && $0.suspect != "1 3 1" }
        // Those whose prerequisites, among the restored ones, lead back to them.
        let inCycle = nodes.indices.map { start -> Bool in
            var seen: Set<Int> = []
            var stack = nodes[start].prerequisites.filter { restored[$0] }
            while let next = stack.popLast() {
                if next == start { return true }
                if seen.insert(next).inserted { stack += nodes[next].prerequisites.filter { restored[$0] } }
            }
            return false
        }
        // What fails at restore (in the failed area, expired, crash-looped, in a cycle), and what
        // follows it; what cannot run in this launch (an unregistered type), and what waits for
        // it; and what ends early. (A record of an unregistered type is never restored: it
        // stays, whatever its prerequisites.)
        /// `values`, with every index set for which `rule` holds, until none changes.
        func settle(_ values: [Bool], _ rule: ([Bool], Int) -> Bool) -> [Bool] {
            var values = values
            var changed = true
            while changed {
                changed = false
                for index in nodes.indices where !values[index] && rule(values, index) {
                    values[index] = true
                    changed = true
                }
            }
            return values
        }
        let fails = settle(nodes.indices.map { nodes[$0].area == .failed || (nodes[$0].area == .pending && (!restored[$0] || inCycle[$0])) }) { fails, index in
            nodes[index].area == .pending && nodes[index].prerequisites.contains { fails[$0] }
        }
        let held = settle(nodes.indices.map { nodes[$0].area == .unregistered && !fails[$0] }) { held, index in
            !fails[index] && nodes[index].prerequisites.contains { held[$0] }
        }
        let early = settle([Bool](repeating: false, count: nodes.count)) { early, index in
            let node = nodes[index]
            return node.area == .pending && !held[index] && (fails[index] || (
                !node.isDated && !node.isConditioned && node.prerequisites.allSatisfy { nodes[$0].area == .gone || early[$0] }
            ))
        }
        return early.indices.filter { early[$0] }
    }

    /// The records whose operation has ended (succeeded or failed), by identifier.
    static func ended(_ fixture: QueueFixture) -> Set<String> {
        Set(fixture.deliveredEvents().compactMap { event in
            switch event {
            case .succeeded(let id), .failed(let id, _): return id.rawValue
            default: return nil
            }
        })
    }
}
