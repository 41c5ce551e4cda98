import Foundation
import Logging
import PostgresNIO

// Waiting for work without polling: adds, retries, releases and re-queues notify the queue's
// channel (`LISTEN/NOTIFY`), and a waiting worker also wakes when the earliest not-yet-due
// operation comes due or the earliest lease expires.

extension FleetStore {
    /// The `LISTEN/NOTIFY` channel of this queue: `<schema>_work`.
    public var notificationChannel: String { schema + "_work" }

    /// Waits until there may be work to claim, at most `timeout`, without polling.
    ///
    /// Returns at once when an operation is due and unleased, or a lease has expired.
    /// Otherwise it listens on ``notificationChannel`` (a connection of the pool is held
    /// meanwhile) and returns when another worker adds, retries, releases or re-queues
    /// operations, when the earliest operation not due yet comes due, when the earliest lease
    /// expires, or when `timeout` has passed; whichever comes first. A waiting task that is
    /// cancelled returns at once.
    ///
    /// A return does not promise a successful claim (another worker may be quicker): claim,
    /// and wait again when the claim is empty.
    ///
    /// ```swift
    /// while !Task.isCancelled {
    ///     let claims = try await store.claim(worker: worker, limit: 8)
    ///     if claims.isEmpty {
    ///         try await store.waitForWork(atMost: .seconds(60))
    ///         continue
    ///     }
    ///     try await run(claims)
    /// }
    /// ```
    ///
    /// - Returns: `true` when a notification or a due date ended the wait, `false` when
    ///   `timeout` did.
    @discardableResult
    public func waitForWork(atMost timeout: Duration) async throws -> Bool {
        try await client.withConnection { connection in
            try await connection.listen(on: notificationChannel) { notifications in
                // Listening already: anything added from here on notifies; anything before is
                // seen by this query.
                let untilNext = try await secondsUntilWork(on: connection)
                if let untilNext, untilNext <= 0 { return true }
                let timeoutSeconds = Self.seconds(timeout)
                let wait = min(timeoutSeconds, untilNext ?? timeoutSeconds)
                return try await withThrowingTaskGroup(of: Bool.self) { group in
                    group.addTask {
                        for try await _ in notifications { return true }
                        return false
                    }
                    group.addTask {
                        try? await Task.sleep(for: .seconds(max(0, wait)))
                        return wait < timeoutSeconds
                    }
                    let first = try await group.next() ?? false
                    group.cancelAll()
                    return first
                }
            }
        }
    }

    /// Seconds (the database's clock) until the earliest unleased operation is due or the
    /// earliest lease expires; `nil` when the queue holds neither.
    func secondsUntilWork(on connection: PostgresConnection) async throws -> Double? {
        let rows = try await connection.query(
            """
            SELECT extract(epoch FROM least(
                (SELECT min(due_at) FROM \(unescaped: schema).operations WHERE area = 'pending' AND lease_owner IS NULL),
                (SELECT min(lease_expires_at) FROM \(unescaped: schema).operations WHERE lease_owner IS NOT NULL)
            ) - now())::float8
            """,
            logger: logger
        )
        for try await (seconds,) in rows.decode((Double?).self) { return seconds }
        return nil
    }

    /// `query` (an `UPDATE … RETURNING`) wrapped so that the same statement notifies
    /// ``notificationChannel`` for the rows it changed (none: no notification).
    func notifying(_ query: PostgresQuery) -> PostgresQuery {
        // The channel is made of the schema's name, checked to be letters, digits and `_`.
        PostgresQuery(
            unsafeSQL: "WITH changed AS (\(query.sql)) SELECT changed.*, pg_notify('\(notificationChannel)', '') FROM changed",
            binds: query.binds
        )
    }
}
