import Foundation

/// An error of a ``FleetStore``: what went wrong, and what was not changed.
///
/// ```swift
/// do {
///     try await store.complete(claim)
/// } catch let error as FleetError where error.code == .leaseLost {
///     // Another worker owns the operation now: this attempt's result is dropped.
/// }
/// ```
public struct FleetError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of error it is.
    public enum Code: Sendable, Equatable {
        /// The database's schema is newer than this code knows (a newer worker migrated it).
        /// Nothing was written: upgrade this worker.
        case schemaTooNew(found: Int, supported: Int)
        /// The database's schema is older than this code needs: ``FleetStore/migrate()`` was
        /// not run. Nothing was written.
        case schemaTooOld(found: Int, required: Int)
        /// The claim's lease is no longer this worker's: it expired and the operation was
        /// claimed again (or moved aside, re-queued, purged). The write was refused: the new
        /// owner's state stands (fencing).
        case leaseLost
        /// An operation with this identifier is already stored. Nothing of the call was
        /// written (a batch is all or none).
        case duplicateIdentifier
        /// The record asked for is not in the area asked for.
        case notFound
    }

    /// What kind of error it is.
    public let code: Code
    /// A sentence for a person: what happened and what to do.
    public let message: String

    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    public static func == (lhs: FleetError, rhs: FleetError) -> Bool { lhs.code == rhs.code }
}
