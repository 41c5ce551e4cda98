import Foundation
import Logging
import PostgresNIO
import RetryingOperationPostgreSQL
import XCTest

/// The base of the fleet tests: one throwaway PostgreSQL cluster for the class, and each test
/// a schema of its own in it (so tests never see each other's operations).
class FleetTestCase: XCTestCase, @unchecked Sendable {
    nonisolated(unsafe) static var cluster: TemporaryPostgreSQL?
    nonisolated(unsafe) static var clusterError: (any Error)?

    override class func setUp() {
        super.setUp()
        do {
            cluster = try TemporaryPostgreSQL.start()
        } catch {
            clusterError = error
        }
    }

    override class func tearDown() {
        cluster?.stop()
        cluster = nil
        super.tearDown()
    }

    /// The class's cluster, or the test is skipped (or failed) as ``TemporaryPostgreSQL/start(file:line:)``
    /// says.
    func requireCluster() throws -> TemporaryPostgreSQL {
        if let cluster = Self.cluster { return cluster }
        if let error = Self.clusterError as? XCTSkip { throw error }
        XCTFail("no PostgreSQL cluster: \(Self.clusterError.map { "\($0)" } ?? "not started")")
        throw CancellationError()
    }

    /// A schema name no other test uses.
    func freshSchema() -> String {
        "t_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
    }

    /// Runs `body` with a client of its own on the cluster (its pool running meanwhile).
    func withClient<T: Sendable>(_ body: (PostgresClient) async throws -> T) async throws -> T {
        let cluster = try requireCluster()
        let configuration = PostgresClient.Configuration(
            host: cluster.host, port: cluster.port, username: "postgres", password: nil, database: "postgres", tls: .disable
        )
        let client = PostgresClient(configuration: configuration)
        let running = Task { await client.run() }
        defer { running.cancel() }
        return try await body(client)
    }

    /// Runs `body` with a migrated store of a fresh schema (or the given one) on a client of
    /// its own.
    func withStore<T: Sendable>(
        schema: String? = nil,
        lease: Duration = .seconds(30),
        crashLoopLimit: Int = 3,
        _ body: (FleetStore) async throws -> T
    ) async throws -> T {
        var configuration = FleetStore.Configuration()
        configuration.schema = schema ?? freshSchema()
        configuration.leaseDuration = lease
        configuration.crashLoopLimit = crashLoopLimit
        return try await withClient { client in
            let store = FleetStore(client: client, configuration: configuration)
            try await store.migrate()
            return try await body(store)
        }
    }

    func operation(_ label: String, priority: Int = 0, notBefore: Date? = nil) -> FleetStore.NewOperation {
        FleetStore.NewOperation(typeIdentifier: "test.echo", payload: Data(label.utf8), priority: priority, notBefore: notBefore, tags: [label])
    }

    /// Asserts that `body` throws a ``FleetError`` of `code`.
    func assertFleetError(
        _ code: FleetError.Code,
        file: StaticString = #filePath,
        line: UInt = #line,
        _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            XCTFail("expected \(code), nothing was thrown", file: file, line: line)
        } catch let error as FleetError {
            XCTAssertEqual(error.code, code, "\(error)", file: file, line: line)
        } catch {
            XCTFail("expected \(code), got \(error)", file: file, line: line)
        }
    }
}
