import Foundation
import PostgresNIO
import RetryingOperationPostgreSQL
import XCTest

final class FleetStoreTests: FleetTestCase, @unchecked Sendable {
    // MARK: Adding

    func testAddedOperationsSurviveAServerCrashAndAnotherClientClaimsThem() async throws {
        let schema = freshSchema()
        let added = operation("first")
        try await withStore(schema: schema) { store in
            try await store.add([added, operation("second")])
        }
        // An immediate stop is a crash: no checkpoint, only what the commit flushed.
        let cluster = try requireCluster()
        try cluster.stopServer(immediately: true)
        try cluster.startServer()
        try await withStore(schema: schema) { store in
            let counts = try await store.counts()
            XCTAssertEqual(counts, FleetStore.Counts(queued: 2, leased: 0, failed: 0))
            let claims = try await store.claim(worker: "w2", limit: 1)
            XCTAssertEqual(claims.map(\.id), [added.id])
            XCTAssertEqual(claims.first?.payload, Data("first".utf8))
            XCTAssertEqual(claims.first?.typeIdentifier, "test.echo")
            XCTAssertEqual(claims.first?.attempt, 1)
            XCTAssertEqual(claims.first?.worker, "w2")
        }
    }

    func testABatchWithADuplicateIdentifierAddsNothing() async throws {
        try await withStore { store in
            let first = operation("a")
            try await store.add([first, operation("b")])
            await assertFleetError(.duplicateIdentifier) {
                try await store.add([self.operation("c"), first])
            }
            var twice = operation("d")
            twice.id = UUID()
            await assertFleetError(.duplicateIdentifier) {
                try await store.add([twice, twice])
            }
            let counts = try await store.counts()
            XCTAssertEqual(counts.queued, 2, "neither c nor d was stored")
            let claimed = try await store.claim(worker: "w", limit: 10)
            XCTAssertEqual(Set(claimed.map { String(decoding: $0.payload, as: UTF8.self) }), ["a", "b"])
        }
    }

    // MARK: Claiming

    func testClaimsTakeDueOperationsByPriorityThenOrderAdded() async throws {
        try await withStore { store in
            try await store.add([
                operation("low-1", priority: -4),
                operation("normal-1"),
                operation("high-1", priority: 4),
                operation("later", priority: 8, notBefore: Date().addingTimeInterval(3600)),
                operation("normal-2"),
                operation("high-2", priority: 4),
            ])
            let claimed = try await store.claim(worker: "w", limit: 4)
            XCTAssertEqual(claimed.map { String(decoding: $0.payload, as: UTF8.self) }, ["high-1", "high-2", "normal-1", "normal-2"])
            let rest = try await store.claim(worker: "w", limit: 4)
            XCTAssertEqual(rest.map { String(decoding: $0.payload, as: UTF8.self) }, ["low-1"], "the one not before an hour from now is not due")
            let counts = try await store.counts()
            XCTAssertEqual(counts, FleetStore.Counts(queued: 1, leased: 5, failed: 0))
        }
    }

    func testConcurrentClaimsNeverShareAnOperation() async throws {
        let schema = freshSchema()
        let total = 400
        try await withStore(schema: schema) { store in
            try await store.add((0..<total).map { operation("op-\($0)") })
        }
        // Four workers, each with a pool of its own, claiming 7 at a time until none is left.
        let claimed = try await withThrowingTaskGroup(of: [UUID].self) { group in
            for worker in 0..<4 {
                group.addTask {
                    try await self.withStore(schema: schema) { store in
                        var mine: [UUID] = []
                        while true {
                            let claims = try await store.claim(worker: "w\(worker)", limit: 7)
                            if claims.isEmpty { return mine }
                            for claim in claims { try await store.complete(claim) }
                            mine += claims.map(\.id)
                        }
                    }
                }
            }
            var all: [[UUID]] = []
            for try await ids in group { all.append(ids) }
            return all
        }
        let ids = claimed.flatMap { $0 }
        XCTAssertEqual(ids.count, total, "each operation claimed once")
        XCTAssertEqual(Set(ids).count, total)
        XCTAssertGreaterThan(claimed.filter { !$0.isEmpty }.count, 1, "more than one worker claimed")
        try await withStore(schema: schema) { store in
            let counts = try await store.counts()
            XCTAssertEqual(counts, FleetStore.Counts())
        }
    }

    // MARK: Leases and fencing

    func testAnExpiredLeaseIsClaimedAgainAndTheOldOwnerIsFencedOff() async throws {
        try await withStore(lease: .milliseconds(600)) { store in
            try await store.add([operation("slow")])
            let value1 = try await store.claim(worker: "paused", limit: 1).first
            let first = try XCTUnwrap(value1)
            let value2 = try await store.claim(worker: "other", limit: 1).count
            XCTAssertEqual(value2, 0, "leased: not claimable")
            try await Task.sleep(for: .milliseconds(900))
            let value3 = try await store.claim(worker: "other", limit: 1).first
            let second = try XCTUnwrap(value3)
            XCTAssertEqual(second.id, first.id)
            XCTAssertEqual(second.attempt, 2)
            XCTAssertEqual(second.deaths, 1, "the expired lease counted a death")
            // The first worker comes back (as after SIGSTOP, SIGCONT): every write is refused.
            await assertFleetError(.leaseLost) { try await store.complete(first) }
            await assertFleetError(.leaseLost) { try await store.retry(first, after: .seconds(5)) }
            await assertFleetError(.leaseLost) { try await store.fail(first, reason: "stale") }
            await assertFleetError(.leaseLost) { try await store.release(first) }
            let lost = try await store.extendLeases([first, second])
            XCTAssertEqual(lost, [first])
            let value4 = try await store.counts()
            XCTAssertEqual(value4, FleetStore.Counts(queued: 0, leased: 1, failed: 0), "the new owner's lease stands")
            try await store.complete(second)
            let value5 = try await store.counts()
            XCTAssertEqual(value5, FleetStore.Counts())
        }
    }

    func testAHeartbeatKeepsTheLease() async throws {
        try await withStore(lease: .milliseconds(600)) { store in
            try await store.add([operation("long")])
            let value6 = try await store.claim(worker: "busy", limit: 1).first
            let claim = try XCTUnwrap(value6)
            for _ in 0..<6 {
                try await Task.sleep(for: .milliseconds(200))
                let value7 = try await store.extendLeases([claim])
                XCTAssertEqual(value7, [])
                let value8 = try await store.claim(worker: "other", limit: 1).count
                XCTAssertEqual(value8, 0)
            }
            try await store.complete(claim)
            let value9 = try await store.counts()
            XCTAssertEqual(value9, FleetStore.Counts())
        }
    }

    func testAReleasedClaimIsDueAgainWithoutARetryAndStaysFenced() async throws {
        try await withStore { store in
            try await store.add([operation("unstarted")])
            let value10 = try await store.claim(worker: "stopping", limit: 1).first
            let first = try XCTUnwrap(value10)
            try await store.release(first)
            let value11 = try await store.claim(worker: "stopping", limit: 1).first
            let second = try XCTUnwrap(value11)
            XCTAssertEqual(second.id, first.id)
            XCTAssertEqual(second.retries, 0)
            XCTAssertEqual(second.deaths, 0)
            XCTAssertEqual(second.attempt, 2)
            await assertFleetError(.leaseLost) { try await store.complete(first) }
            try await store.complete(second)
        }
    }

    // MARK: Retries and the failed area

    func testRetriesCountAndWaitTheirDelay() async throws {
        try await withStore { store in
            try await store.add([operation("flaky")])
            let value12 = try await store.claim(worker: "w", limit: 1).first
            let first = try XCTUnwrap(value12)
            try await store.retry(first)
            let value13 = try await store.claim(worker: "w", limit: 1).first
            let second = try XCTUnwrap(value13)
            XCTAssertEqual(second.retries, 1)
            try await store.retry(second, after: .seconds(3600))
            let value14 = try await store.claim(worker: "w", limit: 1).count
            XCTAssertEqual(value14, 0, "not due for an hour")
            let value15 = try await store.counts()
            XCTAssertEqual(value15, FleetStore.Counts(queued: 1, leased: 0, failed: 0))
        }
    }

    func testFailedOperationsAreListedRequeuedAndPurged() async throws {
        try await withStore { store in
            try await store.add([operation("bad"), operation("good")])
            let claims = try await store.claim(worker: "w", limit: 2)
            XCTAssertEqual(claims.count, 2)
            try await store.fail(claims[0], reason: "HTTP 400")
            try await store.complete(claims[1])
            let failed = try await store.failedOperations()
            XCTAssertEqual(failed.map(\.id), [claims[0].id])
            XCTAssertEqual(failed.first?.failure, "HTTP 400")
            let value16 = try await store.claim(worker: "w", limit: 2).count
            XCTAssertEqual(value16, 0, "a failed operation is not claimed")

            try await store.requeueFailed(claims[0].id)
            let value17 = try await store.claim(worker: "w", limit: 2).first
            let again = try XCTUnwrap(value17)
            XCTAssertEqual(again.id, claims[0].id)
            try await store.fail(again, reason: "HTTP 400 again")
            try await store.purgeFailed(again.id)
            let value18 = try await store.counts()
            XCTAssertEqual(value18, FleetStore.Counts())
            await assertFleetError(.notFound) { try await store.purgeFailed(again.id) }
            await assertFleetError(.notFound) { try await store.requeueFailed(UUID()) }
        }
    }

    // MARK: Crash loops

    func testAnOperationWhoseWorkersKeepDyingIsMovedAsideAndNoOtherIsBlamed() async throws {
        try await withStore(lease: .milliseconds(500), crashLoopLimit: 2) { store in
            let killer = operation("killer")
            try await store.add([killer])
            let value19 = try await store.claim(worker: "w1", limit: 1).first
            let first = try XCTUnwrap(value19)
            XCTAssertEqual(first.id, killer.id)
            let bystander = operation("bystander")
            try await store.add([bystander])
            let value20 = try await store.claim(worker: "w2", limit: 1).first
            let healthy = try XCTUnwrap(value20)
            XCTAssertEqual(healthy.id, bystander.id)
            // w1 dies running the killer; w2 keeps its lease alive.
            try await Task.sleep(for: .milliseconds(350))
            let value21 = try await store.extendLeases([healthy])
            XCTAssertEqual(value21, [])
            try await Task.sleep(for: .milliseconds(350))
            let value22 = try await store.extendLeases([healthy])
            XCTAssertEqual(value22, [])
            let value23 = try await store.claim(worker: "w3", limit: 5).first
            let second = try XCTUnwrap(value23)
            XCTAssertEqual(second.id, killer.id)
            XCTAssertEqual(second.deaths, 1)
            // w3 dies too: the second death reaches the limit.
            try await Task.sleep(for: .milliseconds(350))
            let value24 = try await store.extendLeases([healthy])
            XCTAssertEqual(value24, [])
            try await Task.sleep(for: .milliseconds(350))
            let value25 = try await store.extendLeases([healthy])
            XCTAssertEqual(value25, [])
            let value26 = try await store.claim(worker: "w4", limit: 5).count
            XCTAssertEqual(value26, 0, "moved aside, not claimed a third time")
            let failed = try await store.failedOperations()
            XCTAssertEqual(failed.map(\.id), [killer.id])
            XCTAssertEqual(failed.first?.deaths, 2)
            XCTAssertTrue(failed.first?.failure.contains("2 workers died") == true, failed.first?.failure ?? "")
            // The bystander, claimed by a live worker the whole time, was not blamed.
            try await store.complete(healthy)
            let value27 = try await store.counts()
            XCTAssertEqual(value27, FleetStore.Counts(queued: 0, leased: 0, failed: 1))
        }
    }

    // MARK: Schema versions

    func testConcurrentMigrationsMigrateOnce() async throws {
        let schema = freshSchema()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask { try await self.withStore(schema: schema) { _ in } }
            }
            try await group.waitForAll()
        }
        try await withStore(schema: schema) { store in
            try await store.checkSchema()
            try await store.add([operation("after")])
            let value28 = try await store.counts().queued
            XCTAssertEqual(value28, 1)
        }
    }

    func testAWorkerMeetingANewerSchemaRefusesAndWritesNothing() async throws {
        let schema = freshSchema()
        try await withStore(schema: schema) { store in
            try await store.add([operation("kept")])
            // A newer worker's migration, as far as this code can tell.
            try await store.client.query("UPDATE \(unescaped: schema).schema_version SET version = 99")
        }
        try await withClient { client in
            var configuration = FleetStore.Configuration()
            configuration.schema = schema
            let store = FleetStore(client: client, configuration: configuration)
            await assertFleetError(.schemaTooNew(found: 99, supported: FleetStore.schemaVersion)) { try await store.migrate() }
            await assertFleetError(.schemaTooNew(found: 99, supported: FleetStore.schemaVersion)) { try await store.checkSchema() }
            let rows = try await client.query("SELECT version FROM \(unescaped: schema).schema_version")
            for try await (version,) in rows.decode(Int.self) { XCTAssertEqual(version, 99, "the newer version stands") }
            let count = try await client.query("SELECT count(*) FROM \(unescaped: schema).operations")
            for try await (stored,) in count.decode(Int.self) { XCTAssertEqual(stored, 1, "the operation is still there") }
        }
    }

    func testAnUnmigratedDatabaseAsksForTheMigration() async throws {
        try await withClient { client in
            var configuration = FleetStore.Configuration()
            configuration.schema = freshSchema()
            let store = FleetStore(client: client, configuration: configuration)
            await assertFleetError(.schemaTooOld(found: 0, required: FleetStore.schemaVersion)) { try await store.checkSchema() }
        }
    }
}
