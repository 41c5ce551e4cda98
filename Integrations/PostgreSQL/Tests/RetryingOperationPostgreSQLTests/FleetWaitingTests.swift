import Foundation
import RetryingOperationPostgreSQL
import XCTest

/// `waitForWork(atMost:)`: idle workers wake on `NOTIFY` and on due dates, not by polling.
final class FleetWaitingTests: FleetTestCase, @unchecked Sendable {
    func testAWaitReturnsAtOnceWhenWorkIsDue() async throws {
        try await withStore { store in
            try await store.add([operation("due")])
            let started = ContinuousClock.now
            let woken = try await store.waitForWork(atMost: .seconds(30))
            XCTAssertTrue(woken)
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(10), "returned without waiting for the timeout")
        }
    }

    func testAWaitOnAnEmptyQueueEndsAtItsTimeout() async throws {
        try await withStore { store in
            let started = ContinuousClock.now
            let woken = try await store.waitForWork(atMost: .milliseconds(500))
            XCTAssertFalse(woken)
            XCTAssertGreaterThanOrEqual(ContinuousClock.now - started, .milliseconds(450))
        }
    }

    func testAnAddByAnotherWorkerWakesAWaitingOne() async throws {
        let schema = freshSchema()
        try await withStore(schema: schema) { _ in }
        let waiting = waitInAnotherWorker(schema: schema)
        try await Task.sleep(for: .milliseconds(700))
        try await withStore(schema: schema) { store in
            try await store.add([operation("wake up")])
        }
        let (woken, waited) = try await waiting.value
        XCTAssertTrue(woken)
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(300), "it waited for the add")
        XCTAssertLessThan(waited, .seconds(30), "the notification, not the timeout, ended the wait")
    }

    func testAWaitEndsWhenTheEarliestOperationComesDue() async throws {
        try await withStore { store in
            try await store.add([operation("soon", notBefore: Date().addingTimeInterval(1.5)), operation("later", notBefore: Date().addingTimeInterval(3600))])
            let started = ContinuousClock.now
            let woken = try await store.waitForWork(atMost: .seconds(60))
            let waited = ContinuousClock.now - started
            XCTAssertTrue(woken)
            XCTAssertGreaterThanOrEqual(waited, .milliseconds(1000))
            XCTAssertLessThan(waited, .seconds(30))
            let claims = try await store.claim(worker: "w", limit: 5)
            XCTAssertEqual(claims.map { String(decoding: $0.payload, as: UTF8.self) }, ["soon"])
        }
    }

    func testARetryAndARequeueWakeAWaitingWorker() async throws {
        let schema = freshSchema()
        let claim = try await withStore(schema: schema) { store in
            try await store.add([operation("a"), operation("b")])
            return try await store.claim(worker: "w1", limit: 2)
        }
        XCTAssertEqual(claim.count, 2)
        // Both leased for 30 s: a waiter sleeps until a notification.
        for wake in ["retry", "requeue"] {
            let waiting = waitInAnotherWorker(schema: schema)
            try await Task.sleep(for: .milliseconds(700))
            try await withStore(schema: schema) { store in
                if wake == "retry" {
                    try await store.retry(claim[0])
                } else {
                    try await store.fail(claim[1], reason: "test")
                    try await store.requeueFailed(claim[1].id)
                }
            }
            let (woken, waited) = try await waiting.value
            XCTAssertTrue(woken, wake)
            XCTAssertGreaterThanOrEqual(waited, .milliseconds(300), wake)
            XCTAssertLessThan(waited, .seconds(25), "\(wake): woken before the leases' expiry")
            // Take the re-queued one again, so the next waiter sleeps.
            let retaken = try await withStore(schema: schema) { try await $0.claim(worker: "w1", limit: 1) }
            XCTAssertEqual(retaken.count, 1, wake)
        }
    }

    /// A worker of its own waiting for work on `schema` (at most 60 s): whether it was woken,
    /// and after how long.
    func waitInAnotherWorker(schema: String) -> Task<(Bool, Duration), any Error> {
        Task {
            try await self.withStore(schema: schema) { store in
                let started = ContinuousClock.now
                let woken = try await store.waitForWork(atMost: .seconds(60))
                return (woken, ContinuousClock.now - started)
            }
        }
    }
}
