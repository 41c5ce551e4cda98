import Foundation
import Logging
import PersistentOperations
import PostgresNIO

/// One queue of persistent operations in a PostgreSQL database, shared by every worker process
/// that opens it, on any host: operations are added durably, claimed with a lease, and
/// finished, retried or failed by the worker that holds the lease.
///
/// - **Durable when a call returns:** ``add(_:)`` returns once its transaction committed. A
///   batch is one transaction: all of it is stored, or none.
/// - **Claims with leases.** ``claim(worker:limit:)`` takes due operations with
///   `FOR UPDATE SKIP LOCKED` (workers never wait on each other's claims), highest priority
///   first, then in the order they were added, and leases each to the worker for
///   ``Configuration/leaseDuration``. The worker extends its leases with
///   ``extendLeases(_:)`` (its heartbeat) while it runs them.
/// - **At-least-once.** A worker that dies (SIGKILL, a lost host) stops extending its leases;
///   once they expire, the next claim anywhere takes those operations again. An operation can
///   therefore run more than once: its effects must be idempotent, or checked.
/// - **Fencing.** Each claim carries the operation's attempt number, which every claim raises.
///   ``complete(_:)``, ``retry(_:after:)``, ``fail(_:reason:)``, ``release(_:)`` and
///   ``extendLeases(_:)`` write only while the operation is still leased to that worker at that
///   attempt: a worker that comes back after its lease expired and was claimed again gets
///   ``FleetError/Code/leaseLost`` and changes nothing.
/// - **Crash loops, across the fleet.** An expired lease counts a death against the operation
///   that held it (only that one: operations claimed by the same worker are counted each for its
///   own lease). An operation whose leases expire ``Configuration/crashLoopLimit`` times is moved
///   to the failed area instead of being claimed again, where ``requeueFailed(_:)`` and
///   ``purgeFailed(_:)`` act on it.
///
/// ```swift
/// let client = PostgresClient(configuration: .init(host: "db", username: "app", password: secret, database: "app", tls: .disable))
/// Task { await client.run() }                          // postgres-nio's connection pool
/// let store = FleetStore(client: client)
/// try await store.migrate()                            // once per deployment; safe in every worker
///
/// try await store.add([FleetStore.NewOperation(typeIdentifier: "thumbnail", payload: thumbnailRequest)])
///
/// for claim in try await store.claim(worker: "host-a.1234", limit: 8) {
///     do {
///         try await run(claim)
///         try await store.complete(claim)
///     } catch let error as FleetError where error.code == .leaseLost {
///         // Another worker took it over: drop this attempt's result.
///     } catch {
///         try await store.retry(claim, after: .seconds(30))
///     }
/// }
/// ```
///
/// Times (due dates, leases) are the database server's clock, so workers' clocks need not
/// agree.
public final class FleetStore: Sendable {
    /// How a store claims and leases.
    public struct Configuration: Sendable {
        /// The PostgreSQL schema that holds the queue's tables: a lowercase SQL identifier.
        /// Queues in different schemas of one database are independent.
        public var schema = "retrying_operation"
        /// How long a claim is leased to its worker before another worker may take it again,
        /// unless extended (``FleetStore/extendLeases(_:)``). A worker should extend its leases
        /// at a third of this, or more often.
        public var leaseDuration: Duration = .seconds(30)
        /// After how many expired leases an operation is moved to the failed area instead of
        /// being claimed again.
        public var crashLoopLimit = 3

        /// The defaults: schema `retrying_operation`, 30-second leases, 3 deaths.
        public init() {}
    }

    /// An operation to add.
    public struct NewOperation: Sendable {
        /// Its identifier (a new one unless given).
        public var id: UUID
        /// The ``PersistentOperation/persistenceIdentifier`` of the type that runs it.
        public var typeIdentifier: String
        /// Its payload, as the type encodes it.
        public var payload: Data
        /// The payload's version (``PersistentOperation/payloadVersion``).
        public var payloadVersion: Int
        /// Higher runs first among due operations (an `Operation.QueuePriority` raw value).
        public var priority: Int
        /// Not claimed before this date.
        public var notBefore: Date?
        /// Labels to find it by.
        public var tags: [String]

        /// An operation of `typeIdentifier` with `payload`.
        public init(id: UUID = UUID(), typeIdentifier: String, payload: Data, payloadVersion: Int = 1, priority: Int = 0, notBefore: Date? = nil, tags: [String] = []) {
            self.id = id
            self.typeIdentifier = typeIdentifier
            self.payload = payload
            self.payloadVersion = payloadVersion
            self.priority = priority
            self.notBefore = notBefore
            self.tags = tags
        }
    }

    /// How many operations the queue holds, by state.
    public struct Counts: Sendable, Equatable {
        /// Pending and not leased (due or not).
        public var queued = 0
        /// Pending and leased to a worker (running, or its worker died and the lease has not
        /// been taken back yet).
        public var leased = 0
        /// In the failed area.
        public var failed = 0

        /// Counts of `queued`, `leased` and `failed` operations.
        public init(queued: Int = 0, leased: Int = 0, failed: Int = 0) {
            self.queued = queued
            self.leased = leased
            self.failed = failed
        }
    }

    /// An operation of the failed area.
    public struct FailedOperation: Sendable {
        /// Its identifier.
        public var id: UUID
        /// The type that runs it.
        public var typeIdentifier: String
        /// Why it failed: the reason given to ``FleetStore/fail(_:reason:)``, or the crash-loop
        /// message.
        public var failure: String
        /// How many of its leases expired.
        public var deaths: Int
        /// How many attempts were claimed.
        public var attempts: Int
    }

    /// The connection pool (the caller runs it).
    public let client: PostgresClient
    /// How the store claims and leases.
    public let configuration: Configuration
    let logger: Logger
    /// The schema's name as written into statements (checked in `init`).
    let schema: String

    /// A store on `client`'s database. The tables are made or upgraded by ``migrate()``.
    ///
    /// - Precondition: `configuration.schema` is a lowercase SQL identifier (letters, digits,
    ///   `_`; at most 48 characters), `configuration.crashLoopLimit` ≥ 1, and the lease longer
    ///   than zero.
    public init(client: PostgresClient, configuration: Configuration = Configuration(), logger: Logger = Logger(label: "retrying-operation.fleet")) {
        precondition(FleetSchema.isValidName(configuration.schema), "FleetStore: \(configuration.schema) is not a lowercase SQL identifier")
        precondition(configuration.crashLoopLimit >= 1, "FleetStore: crashLoopLimit must be at least 1")
        precondition(configuration.leaseDuration > .zero, "FleetStore: leaseDuration must be longer than zero")
        self.client = client
        self.configuration = configuration
        self.logger = logger
        self.schema = configuration.schema
    }

    /// The schema version this code writes.
    public static var schemaVersion: Int { FleetSchema.currentVersion }

    /// Makes the queue's tables, or upgrades them to this code's version, in one transaction.
    /// Safe to call from every worker at launch: concurrent calls migrate once.
    ///
    /// - Throws: ``FleetError/Code/schemaTooNew(found:supported:)`` when a newer worker has
    ///   migrated the database past this code; nothing is written.
    public func migrate() async throws {
        try await FleetSchema.migrate(schema, client: client, logger: logger)
    }

    /// Throws unless the database's schema is the version this code writes
    /// (``FleetError/Code/schemaTooNew(found:supported:)``,
    /// ``FleetError/Code/schemaTooOld(found:required:)``). A worker that does not migrate
    /// checks this at launch.
    public func checkSchema() async throws {
        try await FleetSchema.check(schema, client: client, logger: logger)
    }

    private var leaseSeconds: Double { Self.seconds(configuration.leaseDuration) }

    // MARK: Adding

    /// Stores `operations` in one transaction: when this returns they are committed, and all
    /// of them are, or none (a duplicate identifier, a lost connection).
    ///
    /// - Throws: ``FleetError/Code/duplicateIdentifier`` when one of the identifiers is
    ///   stored already (or given twice); nothing was written.
    public func add(_ operations: [NewOperation]) async throws {
        guard !operations.isEmpty else { return }
        do {
            try await client.transaction(logger: logger) { connection in
                for operation in operations {
                    try await connection.query(
                        """
                        INSERT INTO \(unescaped: schema).operations
                            (id, type_identifier, payload, payload_version, priority, tags, not_before, due_at)
                        VALUES (\(operation.id), \(operation.typeIdentifier), \(operation.payload), \(operation.payloadVersion),
                            \(operation.priority), \(operation.tags), \(operation.notBefore), greatest(now(), \(operation.notBefore)))
                        """,
                        logger: logger
                    )
                }
                // Delivered when the transaction commits: idle workers wake (`waitForWork`).
                try await connection.query("SELECT pg_notify(\(self.notificationChannel), '')", logger: logger)
            }
        } catch where sqlState(of: error) == "23505" {
            throw FleetError(.duplicateIdentifier, "An operation with one of these identifiers is already stored; none of the \(operations.count) was added.")
        }
    }

    // MARK: Claiming

    /// Takes up to `limit` due operations for `worker`, leased for
    /// ``Configuration/leaseDuration``: highest priority first, then in the order they were
    /// added. Operations other workers are claiming at the same moment are skipped, not waited
    /// for.
    ///
    /// First, operations whose lease expired are taken back (a death counted against each);
    /// those that reach ``Configuration/crashLoopLimit`` deaths go to the failed area instead.
    ///
    /// - Parameter worker: who claims: unique in the fleet for the life of the process (for
    ///   example the host name and the process identifier).
    /// - Returns: the claims, in run order.
    public func claim(worker: String, limit: Int) async throws -> [FleetClaim] {
        guard limit > 0 else { return [] }
        let limitValue = configuration.crashLoopLimit
        let lease = leaseSeconds
        return try await client.transaction(logger: logger) { connection in
            let expired = "area = 'pending' AND lease_owner IS NOT NULL AND lease_expires_at <= now()"
            try await connection.query(
                """
                UPDATE \(unescaped: schema).operations SET area = 'failed', failed_at = now(), deaths = deaths + 1,
                    lease_owner = NULL, lease_expires_at = NULL,
                    failure = 'moved aside: ' || (deaths + 1) || ' workers died while it ran (their leases expired)'
                WHERE id IN (SELECT id FROM \(unescaped: schema).operations WHERE \(unescaped: expired) AND deaths + 1 >= \(limitValue)
                    FOR UPDATE SKIP LOCKED)
                """,
                logger: logger
            )
            try await connection.query(
                """
                UPDATE \(unescaped: schema).operations SET deaths = deaths + 1, lease_owner = NULL, lease_expires_at = NULL
                WHERE id IN (SELECT id FROM \(unescaped: schema).operations WHERE \(unescaped: expired) FOR UPDATE SKIP LOCKED)
                """,
                logger: logger
            )
            let rows = try await connection.query(
                """
                UPDATE \(unescaped: schema).operations o
                SET attempts = o.attempts + 1, lease_owner = \(worker), lease_expires_at = now() + \(lease) * interval '1 second'
                FROM (SELECT id FROM \(unescaped: schema).operations
                      WHERE area = 'pending' AND lease_owner IS NULL AND due_at <= now()
                      ORDER BY priority DESC, sequence LIMIT \(limit) FOR UPDATE SKIP LOCKED) c
                WHERE o.id = c.id
                RETURNING o.id, o.type_identifier, o.payload, o.payload_version, o.attempts, o.retries, o.deaths,
                    o.lease_expires_at, o.priority, o.sequence
                """,
                logger: logger
            )
            var claims: [(claim: FleetClaim, priority: Int, sequence: Int)] = []
            for try await row in rows.decode((UUID, String, Data, Int, Int, Int, Int, Date, Int, Int).self) {
                let claim = FleetClaim(
                    id: row.0, typeIdentifier: row.1, payload: row.2, payloadVersion: row.3, attempt: row.4,
                    retries: row.5, deaths: row.6, leaseExpiresAt: row.7, worker: worker
                )
                claims.append((claim, row.8, row.9))
            }
            return claims.sorted { ($0.priority, -$0.sequence) > ($1.priority, -$1.sequence) }.map(\.claim)
        }
    }

    /// Extends the leases of `claims` by ``Configuration/leaseDuration`` from now: the
    /// heartbeat of a worker running them. Returns the claims whose lease is no longer this
    /// worker's (fenced off: stop working on them, their results will be refused).
    @discardableResult
    public func extendLeases(_ claims: [FleetClaim]) async throws -> [FleetClaim] {
        guard !claims.isEmpty else { return [] }
        var lost: [FleetClaim] = []
        for (worker, group) in Dictionary(grouping: claims, by: \.worker) {
            let rows = try await client.query(
                """
                UPDATE \(unescaped: schema).operations o SET lease_expires_at = now() + \(leaseSeconds) * interval '1 second'
                FROM unnest(\(group.map(\.id))::uuid[], \(group.map(\.attempt))::int8[]) AS c(id, attempt)
                WHERE o.id = c.id AND o.attempts = c.attempt AND o.lease_owner = \(worker) AND o.area = 'pending'
                RETURNING o.id
                """,
                logger: logger
            )
            var kept = Set<UUID>()
            for try await (id,) in rows.decode(UUID.self) { kept.insert(id) }
            lost += group.filter { !kept.contains($0.id) }
        }
        return lost
    }

    // MARK: Ending an attempt

    /// Removes the operation: its attempt succeeded (or it is done for good and kept nowhere).
    ///
    /// - Throws: ``FleetError/Code/leaseLost`` when the claim is no longer this worker's;
    ///   nothing was changed.
    public func complete(_ claim: FleetClaim) async throws {
        try await expectChange(
            """
            DELETE FROM \(unescaped: schema).operations o
            WHERE o.id = \(claim.id) AND o.attempts = \(claim.attempt) AND o.lease_owner = \(claim.worker) AND o.area = 'pending'
            RETURNING o.id
            """,
            claim, "complete"
        )
    }

    /// Schedules another attempt `after` from now (the database's clock), counting a retry,
    /// and gives the lease up.
    ///
    /// - Throws: ``FleetError/Code/leaseLost`` when the claim is no longer this worker's;
    ///   nothing was changed.
    public func retry(_ claim: FleetClaim, after delay: Duration = .zero) async throws {
        let seconds = Self.seconds(delay)
        try await expectChange(
            """
            UPDATE \(unescaped: schema).operations o SET retries = o.retries + 1,
                next_attempt_at = now() + \(seconds) * interval '1 second',
                due_at = greatest(o.not_before, now() + \(seconds) * interval '1 second'),
                lease_owner = NULL, lease_expires_at = NULL
            WHERE o.id = \(claim.id) AND o.attempts = \(claim.attempt) AND o.lease_owner = \(claim.worker) AND o.area = 'pending'
            RETURNING o.id
            """,
            claim, "retry", notifies: true
        )
    }

    /// Gives the lease up without counting a retry: the operation is due again at once (for a
    /// worker shutting down before it started the claim). Its attempt number stays raised, so
    /// this claim stays fenced off.
    ///
    /// - Throws: ``FleetError/Code/leaseLost`` when the claim is no longer this worker's.
    public func release(_ claim: FleetClaim) async throws {
        try await expectChange(
            """
            UPDATE \(unescaped: schema).operations o SET lease_owner = NULL, lease_expires_at = NULL
            WHERE o.id = \(claim.id) AND o.attempts = \(claim.attempt) AND o.lease_owner = \(claim.worker) AND o.area = 'pending'
            RETURNING o.id
            """,
            claim, "release", notifies: true
        )
    }

    /// Moves the operation to the failed area with `reason`.
    ///
    /// - Throws: ``FleetError/Code/leaseLost`` when the claim is no longer this worker's;
    ///   nothing was changed.
    public func fail(_ claim: FleetClaim, reason: String) async throws {
        try await expectChange(
            """
            UPDATE \(unescaped: schema).operations o SET area = 'failed', failed_at = now(), failure = \(reason),
                lease_owner = NULL, lease_expires_at = NULL
            WHERE o.id = \(claim.id) AND o.attempts = \(claim.attempt) AND o.lease_owner = \(claim.worker) AND o.area = 'pending'
            RETURNING o.id
            """,
            claim, "fail"
        )
    }

    /// Runs `query` (a fenced write that returns the rows it changed) and throws
    /// ``FleetError/Code/leaseLost`` when it changed none.
    ///
    /// With `notifies`, the change also wakes idle workers (the operation is claimable again
    /// now or later): the query is wrapped so that the notification is sent in the same
    /// statement, only when a row changed.
    private func expectChange(_ query: PostgresQuery, _ claim: FleetClaim, _ action: String, notifies: Bool = false) async throws {
        guard try await changesRows(notifies ? notifying(query) : query) else {
            throw FleetError(
                .leaseLost,
                "\(action) of \(claim.id) (attempt \(claim.attempt)) refused: its lease is no longer \(claim.worker)'s. Another worker owns the operation now; nothing was changed."
            )
        }
    }

    /// Runs `query` (a write that returns the rows it changed) and tells whether it changed any.
    private func changesRows(_ query: PostgresQuery) async throws -> Bool {
        let rows = try await client.query(query, logger: logger)
        var changed = false
        for try await _ in rows { changed = true }
        return changed
    }

    static func seconds(_ duration: Duration) -> Double {
        let components = duration.components
        return Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    // MARK: The failed area and counts

    /// How many operations are queued, leased and failed (one statement: a consistent view).
    public func counts() async throws -> Counts {
        let rows = try await client.query(
            """
            SELECT count(*) FILTER (WHERE area = 'pending' AND lease_owner IS NULL),
                   count(*) FILTER (WHERE area = 'pending' AND lease_owner IS NOT NULL),
                   count(*) FILTER (WHERE area = 'failed')
            FROM \(unescaped: schema).operations
            """,
            logger: logger
        )
        for try await (queued, leased, failed) in rows.decode((Int, Int, Int).self) {
            return Counts(queued: queued, leased: leased, failed: failed)
        }
        return Counts()
    }

    /// The operations of the failed area, oldest failure first.
    public func failedOperations() async throws -> [FailedOperation] {
        let rows = try await client.query(
            """
            SELECT id, type_identifier, coalesce(failure, ''), deaths, attempts FROM \(unescaped: schema).operations
            WHERE area = 'failed' ORDER BY failed_at, sequence
            """,
            logger: logger
        )
        var failed: [FailedOperation] = []
        for try await (id, type, failure, deaths, attempts) in rows.decode((UUID, String, String, Int, Int).self) {
            failed.append(FailedOperation(id: id, typeIdentifier: type, failure: failure, deaths: deaths, attempts: attempts))
        }
        return failed
    }

    /// Puts the failed operation `id` back in the queue, due now, its retries and deaths
    /// counted from zero again.
    ///
    /// - Throws: ``FleetError/Code/notFound`` when no failed operation has that identifier.
    public func requeueFailed(_ id: UUID) async throws {
        let requeue: PostgresQuery = """
            UPDATE \(unescaped: schema).operations SET area = 'pending', failed_at = NULL, failure = NULL, retries = 0, deaths = 0,
                next_attempt_at = NULL, due_at = greatest(now(), not_before)
            WHERE id = \(id) AND area = 'failed' RETURNING id
            """
        guard try await changesRows(notifying(requeue)) else { throw FleetError(.notFound, "No failed operation \(id) to re-queue.") }
    }

    /// Deletes the failed operation `id`.
    ///
    /// - Throws: ``FleetError/Code/notFound`` when no failed operation has that identifier.
    public func purgeFailed(_ id: UUID) async throws {
        let purge: PostgresQuery = "DELETE FROM \(unescaped: schema).operations WHERE id = \(id) AND area = 'failed' RETURNING id"
        guard try await changesRows(purge) else { throw FleetError(.notFound, "No failed operation \(id) to purge.") }
    }
}

/// An operation leased to a worker by ``FleetStore/claim(worker:limit:)``: what it needs to run
/// it, and the attempt number that fences its writes.
public struct FleetClaim: Sendable, Hashable {
    /// The operation's identifier.
    public let id: UUID
    /// The type that runs it.
    public let typeIdentifier: String
    /// Its payload.
    public let payload: Data
    /// The payload's version.
    public let payloadVersion: Int
    /// This claim's number (1 for the first claim of the operation; every claim raises it):
    /// the fencing token every write of the claim is checked against.
    public let attempt: Int
    /// Retries counted so far (``FleetStore/retry(_:after:)``).
    public let retries: Int
    /// How many of its earlier leases expired (workers that died running it).
    public let deaths: Int
    /// When the lease expires unless extended (the database's clock).
    public let leaseExpiresAt: Date
    /// The worker it is leased to.
    public let worker: String
}
