import Foundation
import Logging
import PostgresNIO
import RetryingOperationPostgreSQL
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Four worker processes (`FleetChaosWorker`, each its own "host") work one queue while they
/// are killed with SIGKILL at random moments, one is paused with SIGSTOP past its leases (they
/// are claimed again meanwhile) and resumed, and the server is restarted as after a crash. Checked against the workers' effects
/// log: nothing acknowledged is lost, no write of a fenced-off worker is accepted, everything
/// drains. The kills go on, 30–180 ms apart, for as long as there is work (at least
/// `FLEET_CHAOS_KILLS` of them); the pause comes after a third of those kills and the server
/// restart after two thirds, both while work is pending.
///
/// `FLEET_CHAOS_OPERATIONS` (default 20,000), `FLEET_CHAOS_KILLS` (default 50) and
/// `FLEET_CHAOS_SEED` change the run.
final class FleetChaosTests: FleetTestCase, @unchecked Sendable {
    func testKilledAndPausedWorkersAndAServerRestartLoseNothingAndNoFencedWriteIsAccepted() async throws {
        let cluster = try requireCluster()
        let environment = ProcessInfo.processInfo.environment
        let total = environment["FLEET_CHAOS_OPERATIONS"].flatMap(Int.init) ?? 20_000
        let kills = environment["FLEET_CHAOS_KILLS"].flatMap(Int.init) ?? 50
        let seed = environment["FLEET_CHAOS_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64.max)
        var random = SplitMix64(seed: seed)
        print("fleet chaos: \(total) operations, \(kills) kills, seed \(seed) (FLEET_CHAOS_SEED)")
        let lease = 2_000   // milliseconds
        let schema = freshSchema()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-chaos-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let effectsPath = directory.appendingPathComponent("effects.log").path
        let workerOutput = directory.appendingPathComponent("workers.out").path
        let workerPath = try ChildProcess.builtExecutable(named: "FleetChaosWorker")

        // Every add below returned: these are acknowledged.
        var added = Set<UUID>()
        try await withStore(schema: schema) { store in
            for start in stride(from: 0, to: total, by: 500) {
                let batch = (start..<min(total, start + 500)).map { self.operation("op-\($0)", priority: $0 % 3) }
                try await store.add(batch)
                added.formUnion(batch.map(\.id))
            }
        }
        XCTAssertEqual(added.count, total)

        var incarnations = 0
        func launch(_ slot: Int) throws -> (pid: pid_t, name: String) {
            incarnations += 1
            let name = "w\(slot).\(incarnations)"
            let pid = try ChildProcess.spawn(workerPath, [
                "--port", "\(cluster.port)", "--schema", schema, "--log", effectsPath, "--name", name, "--lease-ms", "\(lease)",
            ], output: workerOutput)
            return (pid, name)
        }
        var workers = try (0..<4).map(launch)
        defer {
            for worker in workers {
                kill(worker.pid, SIGCONT)
                kill(worker.pid, SIGKILL)
                _ = try? ChildProcess.wait(worker.pid)
            }
        }
        let started = ContinuousClock.now
        var killedBySignal = 0
        var pausedWorker: String?
        var restarted = false
        var pendingWhenChaosEnded = 0
        var pendingAtPause = 0
        var pendingAtRestart = 0
        var totalKills = 0
        var thiefLost = 0

        try await withClient { client in
            func leasesHeld(by name: String) async throws -> Int {
                let rows = try await client.query(
                    "SELECT count(*) FROM \(unescaped: schema).operations WHERE lease_owner = \(name)", logger: Logger(label: "chaos")
                )
                for try await (count,) in rows.decode(Int.self) { return count }
                return 0
            }
            // Pauses a worker that holds leases, and the others with it, until its leases
            // expired and another claimer (this test, "thief") took them; then resumes it: its
            // writes for them must all be refused while the thief holds them.
            var thiefConfiguration = FleetStore.Configuration()
            thiefConfiguration.schema = schema
            thiefConfiguration.crashLoopLimit = 1_000
            let thief = FleetStore(client: client, configuration: thiefConfiguration)
            func pauseOne() async throws {
                for _ in 0..<200 {
                    let slot = Int(random.next() % 4)
                    let worker = workers[slot]
                    kill(worker.pid, SIGSTOP)
                    guard try await leasesHeld(by: worker.name) > 0 else {
                        kill(worker.pid, SIGCONT)
                        try await Task.sleep(for: .milliseconds(20))
                        continue
                    }
                    let others = workers.filter { $0.pid != worker.pid }
                    for other in others { kill(other.pid, SIGSTOP) }
                    // Its operations first in the thief's claim.
                    let rows = try await client.query(
                        "UPDATE \(unescaped: schema).operations SET priority = 1000 WHERE lease_owner = \(worker.name) RETURNING id",
                        logger: Logger(label: "chaos")
                    )
                    var its = Set<UUID>()
                    for try await (id,) in rows.decode(UUID.self) { its.insert(id) }
                    try await Task.sleep(for: .milliseconds(lease + 500))
                    let stolen = try await thief.claim(worker: "thief", limit: its.count)
                    XCTAssertEqual(Set(stolen.map(\.id)), its, "the paused worker's expired leases were claimed again")
                    pausedWorker = worker.name
                    kill(worker.pid, SIGCONT)
                    // Its writes for the stolen claims come now, while the thief holds them.
                    try await Task.sleep(for: .seconds(1))
                    for claim in stolen {
                        do {
                            try await thief.release(claim)
                        } catch let error as FleetError where error.code == .leaseLost {
                            thiefLost += 1
                        }
                    }
                    for other in others { kill(other.pid, SIGCONT) }
                    return
                }
                XCTFail("no worker held a lease in 200 tries")
            }

            func pending() async throws -> Int {
                let rows = try await client.query(
                    "SELECT count(*) FROM \(unescaped: schema).operations WHERE area = 'pending'", logger: Logger(label: "chaos")
                )
                for try await (count,) in rows.decode(Int.self) { return count }
                return 0
            }
            // Kills at random moments for as long as there is work (and at least `kills`).
            var killed = 0
            let deadline = ContinuousClock.now + .seconds(300)
            while ContinuousClock.now < deadline {
                if killed >= kills, try await pending() == 0 { break }
                try await Task.sleep(for: .milliseconds(30 + Int(random.next() % 150)))
                let slot = Int(random.next() % 4)
                kill(workers[slot].pid, SIGKILL)
                if try ChildProcess.wait(workers[slot].pid) == .signalled(SIGKILL) { killedBySignal += 1 }
                workers[slot] = try launch(slot)
                killed += 1
                if killed == kills / 3 {
                    pendingAtPause = try await pending()
                    try await pauseOne()
                }
                if killed == 2 * kills / 3 {
                    pendingAtRestart = try await pending()
                    // As a crash: no checkpoint, only what commits flushed.
                    try cluster.stopServer(immediately: true)
                    try cluster.startServer()
                    restarted = true
                }
            }
            totalKills = killed
        }
        // Everything drains (the last kills' leases expire first).
        var counts = FleetStore.Counts()
        try await withStore(schema: schema) { store in
            counts = try await store.counts()
            pendingWhenChaosEnded = counts.queued + counts.leased
            let deadline = ContinuousClock.now + .seconds(300)
            while counts.queued + counts.leased > 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
                counts = try await store.counts()
            }
        }
        let elapsed = ContinuousClock.now - started
        for worker in workers {
            kill(worker.pid, SIGKILL)
            _ = try ChildProcess.wait(worker.pid)
        }
        workers = []

        // The effects log.
        let log = try String(contentsOfFile: effectsPath, encoding: .utf8)
        var ran: [UUID: Int] = [:]
        var done: [UUID: [Int]] = [:]
        var maxClaimed: [UUID: Int] = [:]
        var fencedByPaused = 0
        var fencedOther = 0
        var malformed = 0
        var doneBy = Set<String>()
        for line in log.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count == 4, let id = UUID(uuidString: String(fields[1])), let attempt = Int(fields[2]) else {
                malformed += 1
                continue
            }
            let worker = String(fields[3])
            switch fields[0] {
            case "claimed": maxClaimed[id] = max(maxClaimed[id] ?? 0, attempt)
            case "ran": ran[id, default: 0] += 1
            case "done":
                done[id, default: []].append(attempt)
                doneBy.insert(String(worker.split(separator: ".")[0]))
            case "fenced": if worker == pausedWorker { fencedByPaused += 1 } else { fencedOther += 1 }
            default: malformed += 1
            }
        }
        let ranTwice = ran.values.filter { $0 > 1 }.count
        print("""
            fleet chaos: drained in \(elapsed) (\(pendingWhenChaosEnded) of \(total) still pending when the chaos ended); \
            \(killedBySignal) workers killed, \(pausedWorker ?? "none") paused (\(pendingAtPause) pending), server restarted \
            (\(pendingAtRestart) pending): \(restarted); \
            \(ranTwice) operations ran more than once (at-least-once); \(fencedByPaused) writes of the paused worker and \
            \(fencedOther) of slow ones refused
            """)

        XCTAssertEqual(malformed, 0, "every effects line whole")
        XCTAssertGreaterThanOrEqual(totalKills, kills)
        XCTAssertEqual(killedBySignal, totalKills, "each worker was alive when killed (none ended by itself)")
        XCTAssertGreaterThan(pendingAtPause, 0, "paused while there was work")
        XCTAssertGreaterThan(pendingAtRestart, 0, "the server restarted while there was work")
        XCTAssertTrue(restarted)
        XCTAssertNotNil(pausedWorker)
        XCTAssertEqual(counts, FleetStore.Counts(), "everything drained; nothing moved aside")
        XCTAssertEqual(added.subtracting(ran.keys).count, 0, "no acknowledged operation lost: each ran")
        XCTAssertEqual(Set(ran.keys).subtracting(added).count, 0)
        XCTAssertEqual(done.values.filter { $0.count > 1 }.count, 0, "one completion accepted per operation")
        let fencedAccepted = done.filter { id, attempts in attempts.contains { $0 < (maxClaimed[id] ?? 0) } }
        XCTAssertEqual(fencedAccepted.count, 0, "no completion accepted from an attempt another claim had replaced")
        XCTAssertGreaterThan(fencedByPaused, 0, "the resumed worker's writes were refused")
        XCTAssertEqual(thiefLost, 0, "no write of the resumed worker replaced the claim that took over its lease")
        XCTAssertEqual(doneBy.count, 4, "every worker slot completed work")
    }
}

/// A small seeded generator, so that a failing run can be repeated (`FLEET_CHAOS_SEED`).
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
