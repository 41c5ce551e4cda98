import Foundation
import PostgresNIO
import RetryingOperationPostgreSQL
import XCTest

/// The README's example, compiled and run against the test cluster (its snippets are checked
/// by `scripts/readme-snippets.py`).
final class FleetReadmeTests: FleetTestCase, @unchecked Sendable {
    func testTheReadmeWorkerLoopRunsWhatWasAdded() async throws {
        try await withClient { client in
            // snippet: fleet-setup
            let store = FleetStore(client: client)    // schema "retrying_operation", 30 s leases
            try await store.migrate()                 // safe in every worker at launch: migrates once
            // end snippet
            let ran = Ran()
            @Sendable func run(_ claim: FleetClaim) async throws {
                ran.append(String(decoding: claim.payload, as: UTF8.self))
            }
            for payload in ["a", "b", "c"].map({ Data($0.utf8) }) {
                // snippet: fleet-add
                // Durable when `add` returns; a batch is stored all or none.
                try await store.add([
                    FleetStore.NewOperation(typeIdentifier: "thumbnail", payload: payload, priority: 4, tags: ["user-42"]),
                ])
                // end snippet
            }
            let loop = Task {
                // snippet: fleet-worker
                let worker = "\(ProcessInfo.processInfo.hostName).\(ProcessInfo.processInfo.processIdentifier)"
                while !Task.isCancelled {
                    let claims = try await store.claim(worker: worker, limit: 8)
                    if claims.isEmpty {
                        try await store.waitForWork(atMost: .seconds(60))   // NOTIFY, or the next due date
                        continue
                    }
                    for claim in claims {
                        do {
                            try await run(claim)                       // your work; extend leases while it runs
                            try await store.complete(claim)
                        } catch let error as FleetError where error.code == .leaseLost {
                            // Its lease expired and another worker took it: drop this result.
                        } catch {
                            try await store.retry(claim, after: .seconds(30))
                        }
                    }
                }
                // end snippet
            }
            // One more while the worker waits: NOTIFY wakes it.
            try await Task.sleep(for: .milliseconds(500))
            try await store.add([FleetStore.NewOperation(typeIdentifier: "thumbnail", payload: Data("d".utf8))])
            let deadline = ContinuousClock.now + .seconds(30)
            while ran.values.count < 4, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            loop.cancel()
            _ = await loop.result
            XCTAssertEqual(ran.values.sorted(), ["a", "b", "c", "d"])
            let counts = try await store.counts()
            XCTAssertEqual(counts, FleetStore.Counts())
        }
    }
}

/// What a test's work ran, from any task.
final class Ran: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []
    func append(_ value: String) { lock.withLock { list.append(value) } }
    var values: [String] { lock.withLock { list } }
}
