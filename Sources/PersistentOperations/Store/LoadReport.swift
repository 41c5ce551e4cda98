import Foundation

/// What reading one area of a store found: the records, and every entry that could not be
/// used with the reason.
///
/// ```swift
/// let report = try store.loadPending()
/// for record in report.records { schedule(record) }            // already in run order
/// for entry in report.quarantined { log("\(entry.name): \(entry.reason)") }
/// ```
package struct LoadReport: Sendable {
    /// An entry of the area that is not a usable record.
    package struct Entry: Sendable, Equatable {
        /// The entry's file name in the area it was found in.
        package var name: String
        /// Why it could not be used, for people.
        package var reason: String
        /// The kind of problem, such as ``PersistenceError/Code/corruptRecord``.
        package var code: PersistenceError.Code
        /// The entry's name in the quarantine area, when it was moved there.
        package var quarantineName: String?
    }

    /// The usable records, in run order (see ``OperationRecord/runsBefore(_:_:)``).
    package var records: [OperationRecord] = []
    /// Entries that were moved to the quarantine area.
    package var quarantined: [Entry] = []
    /// Entries left where they are: records written by a newer format version, and, when the
    /// store is read-only, every entry that would otherwise have been quarantined.
    package var skipped: [Entry] = []
    /// Records whose move between the pending and failed areas had been interrupted by a
    /// crash, and was completed by this load.
    package var completedMoves: [OperationRecord] = []

    /// Sorts ``records`` into run order.
    mutating func sortRecords() {
        records.sort(by: OperationRecord.runsBefore)
    }
}
