import PersistentOperations

/// Which records `list` and `failed` show: those of one type, carrying every tag given, and
/// (pending records only) in one state. An empty filter lets every record through.
///
/// ```swift
/// let view = try ReadOnlyPersistentStore(directory: URL(fileURLWithPath: "/var/app/store"))
/// let filter = RecordFilter(typeIdentifier: "demo.upload", tags: ["wifi-only"], state: .blocked)
/// print(try view.pendingRecords().records.filter(filter.includes).map(\.id))
/// ```
struct RecordFilter: Equatable {
    /// A pending record's state as `list --state` selects it, by the STATE the list shows.
    ///
    /// `due`, `scheduled` and `blocked` never overlap, and a record running an attempt (STATE
    /// `running`) is in none of them. `inFlight` is about attempts, not dates: a record whose
    /// attempt was interrupted, in a store no process holds, is also in one of the other three
    /// (it runs again at the next restore).
    enum State: String, CaseIterable {
        /// May start now: no future not-before or next-attempt date, no pending prerequisite,
        /// first in its lane, no attempt running (STATE `queued`). Run conditions are the
        /// app's to judge: a record waiting for one counts as due.
        case due
        /// Waits for a not-before or next-attempt date still to come, and is not blocked
        /// (STATE `scheduled` or `waitingToRetry`).
        case scheduled
        /// Waits for a pending prerequisite, or for the records added before it to its lane
        /// (STATE `waitingForPrerequisites` or `waitingForLane`), whatever its dates.
        case blocked
        /// Has attempts in flight (`attemptsInFlight` above 0, as the record or its attempt
        /// marker counts them): running, when a process holds the store (STATE `running`), or
        /// interrupted by the end of the process that started them.
        case inFlight = "in-flight"

        /// The values `--state` takes, for messages: `due, scheduled, blocked or in-flight`.
        static let choices = allCases.dropLast().map(\.rawValue).joined(separator: ", ") + " or " + allCases.last!.rawValue

        /// Whether `record`, a pending record, is in this state.
        func includes(_ record: StoredOperationRecord) -> Bool {
            switch self {
            case .due: record.state == .queued
            case .scheduled: record.state == .scheduled || record.state == .waitingToRetry
            case .blocked: record.state == .waitingForPrerequisites || record.state == .waitingForLane
            case .inFlight: record.attemptsInFlight > 0
            }
        }
    }

    /// `--type`: only records of this type identifier.
    var typeIdentifier: String?
    /// `--tag`, repeatable: only records carrying every one of these tags, in the order given.
    var tags: [String] = []
    /// `--state`: only pending records in this state.
    var state: State?

    /// Whether the filter lets every record through.
    var isEmpty: Bool { typeIdentifier == nil && tags.isEmpty && state == nil }

    /// Whether `record` passes every part of the filter.
    func includes(_ record: StoredOperationRecord) -> Bool {
        if let typeIdentifier, record.typeIdentifier != typeIdentifier { return false }
        if !tags.allSatisfy(record.tags.contains) { return false }
        if let state, !state.includes(record) { return false }
        return true
    }

    /// The options that select this filter, in the order `--type`, `--tag`…, `--state`.
    var arguments: [String] {
        (typeIdentifier.map { ["--type", $0] } ?? []) + tags.flatMap { ["--tag", $0] } + (state.map { ["--state", $0.rawValue] } ?? [])
    }
}
