import Foundation
import Logging
import PostgresNIO

/// The tables of a fleet's queue, and their versions.
///
/// Every change to the tables is a new entry of ``migrations``, applied in order, once, by
/// ``FleetStore/migrate()``; the version reached is kept in `schema_version`. A worker whose code
/// knows fewer versions than the database has refuses to work on it
/// (``FleetError/Code/schemaTooNew(found:supported:)``) and writes nothing; one that finds fewer
/// than it needs asks for the migration (``FleetError/Code/schemaTooOld(found:required:)``).
enum FleetSchema {
    /// The version this code writes and reads.
    static var currentVersion: Int { migrations.count }

    /// Each version's statements, `{schema}` standing for the schema's name.
    static let migrations: [[String]] = [
        // 1: the operations, pending and failed, with their leases.
        [
            """
            CREATE TABLE {schema}.operations (
                id uuid PRIMARY KEY,
                sequence bigint GENERATED ALWAYS AS IDENTITY,
                type_identifier text NOT NULL,
                payload bytea NOT NULL,
                payload_version integer NOT NULL,
                priority integer NOT NULL,
                tags text[] NOT NULL,
                enqueued_at timestamptz NOT NULL DEFAULT now(),
                not_before timestamptz,
                next_attempt_at timestamptz,
                due_at timestamptz NOT NULL,
                retries integer NOT NULL DEFAULT 0,
                attempts integer NOT NULL DEFAULT 0,
                lease_owner text,
                lease_expires_at timestamptz,
                deaths integer NOT NULL DEFAULT 0,
                area text NOT NULL DEFAULT 'pending' CHECK (area IN ('pending', 'failed')),
                failed_at timestamptz,
                failure text,
                CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
                CHECK (area = 'pending' OR lease_owner IS NULL)
            )
            """,
            // Claims read the due, unleased ones in run order.
            "CREATE INDEX operations_claimable ON {schema}.operations (priority DESC, sequence) WHERE area = 'pending' AND lease_owner IS NULL",
            // Waiting workers read the earliest due date of the unleased ones.
            "CREATE INDEX operations_due ON {schema}.operations (due_at) WHERE area = 'pending' AND lease_owner IS NULL",
            // Reclaims (and waiting workers) read the leased ones by expiry.
            "CREATE INDEX operations_leased ON {schema}.operations (lease_expires_at) WHERE lease_owner IS NOT NULL",
        ],
    ]

    /// Whether `name` is a schema name used as is in statements: lowercase letters, digits and
    /// underscores, not starting with a digit, at most 48 characters.
    static func isValidName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first), name.utf8.count <= 48 else { return false }
        return name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
        }
    }

    /// The version the schema `name` has reached: 0 when it has no tables yet.
    static func version(of name: String, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let exists = try await connection.query("SELECT to_regclass(\(name + ".schema_version"))::text", logger: logger)
        for try await (table,) in exists.decode((String?).self) where table == nil { return 0 }
        let rows = try await connection.query("SELECT version FROM \(unescaped: name).schema_version", logger: logger)
        for try await (version,) in rows.decode(Int.self) { return version }
        return 0
    }

    /// Applies the migrations the schema `name` lacks, in one transaction, under an advisory
    /// lock (so that workers started together migrate once). Throws, writing nothing, when the
    /// schema is newer than this code.
    static func migrate(_ name: String, client: PostgresClient, logger: Logger) async throws {
        try await client.transaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\("retrying_operation_fleet." + name)))", logger: logger)
            let found = try await version(of: name, on: connection, logger: logger)
            if found > currentVersion { throw tooNew(name, found: found) }
            guard found < currentVersion else { return }
            if found == 0 {
                try await connection.query("CREATE SCHEMA IF NOT EXISTS \(unescaped: name)", logger: logger)
                try await connection.query(
                    "CREATE TABLE \(unescaped: name).schema_version (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), version integer NOT NULL)",
                    logger: logger
                )
                try await connection.query("INSERT INTO \(unescaped: name).schema_version (version) VALUES (0)", logger: logger)
            }
            for statements in migrations[found...] {
                for statement in statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement.replacingOccurrences(of: "{schema}", with: name)), logger: logger)
                }
            }
            try await connection.query("UPDATE \(unescaped: name).schema_version SET version = \(currentVersion)", logger: logger)
        }
    }

    /// The error of a worker that meets the schema `name` at a version newer than it knows.
    static func tooNew(_ name: String, found: Int) -> FleetError {
        FleetError(
            .schemaTooNew(found: found, supported: currentVersion),
            "The fleet schema \(name) is at version \(found); this worker knows versions up to \(currentVersion). Nothing was written: upgrade this worker."
        )
    }

    /// Throws unless the schema `name` is at this code's version.
    static func check(_ name: String, client: PostgresClient, logger: Logger) async throws {
        let found = try await client.withConnection { try await version(of: name, on: $0, logger: logger) }
        if found > currentVersion { throw tooNew(name, found: found) }
        if found < currentVersion {
            throw FleetError(
                .schemaTooOld(found: found, required: currentVersion),
                "The fleet schema \(name) is at version \(found); this worker needs version \(currentVersion). Run FleetStore.migrate() first."
            )
        }
    }
}
