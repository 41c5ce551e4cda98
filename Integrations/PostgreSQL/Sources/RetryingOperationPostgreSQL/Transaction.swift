import Logging
import PostgresNIO

extension PostgresClient {
    /// Runs `body` in a transaction, as `withTransaction(logger:_:)` does, and throws what
    /// `body` threw (a ``FleetError``, a server error) rather than postgres-nio's wrapper,
    /// when the rollback succeeded. A failed `BEGIN`, `COMMIT` or rollback is thrown as the
    /// wrapper, because then the outcome is not known from `body` alone.
    func transaction<Result>(
        logger: Logger,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> sending Result {
        do {
            return try await withTransaction(logger: logger, isolation: isolation, body)
        } catch let error as PostgresTransactionError {
            if let closureError = error.closureError, error.rollbackError == nil { throw closureError }
            throw error
        }
    }
}

/// The SQLSTATE of a server error (`"23505"`: a unique key taken), looking inside
/// postgres-nio's transaction wrapper.
func sqlState(of error: any Error) -> String? {
    if let error = error as? PSQLError { return error.serverInfo?[.sqlState] }
    if let error = error as? PostgresTransactionError {
        for inner in [error.closureError, error.commitError, error.beginError, error.rollbackError].compactMap({ $0 }) {
            if let state = sqlState(of: inner) { return state }
        }
    }
    return nil
}
