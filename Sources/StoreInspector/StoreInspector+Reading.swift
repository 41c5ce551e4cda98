import Foundation
import PersistentOperations

/// The reading commands `list`, `show` and `failed`, and the lookup `show` and `export` share.
extension StoreInspector {
    /// Prints the pending records in run order, then the entries that could not be read.
    /// ATTEMPTS counts the attempts started, the one running included. DUE is when the record
    /// may next start (`now` when its dates allow it already); REPEATS shows a periodic
    /// series' schedule.
    ///
    ///     ID     TYPE          STATE      PRIORITY  RETRIES  ATTEMPTS  NEXT ATTEMPT              TAGS  UNIQUE KEY  DUE                       REPEATS
    ///     0B9D…  demo.upload   running    0         1        2         -                         -     upload-1    -                         -
    ///     5C21…  demo.refresh  scheduled  0         0        0         2025-11-21T21:50:00.000Z  -     catalogue   2025-11-21T21:50:00.000Z  every 3600 s, flex 600 s
    ///
    /// Only the records `filter` lets through are listed; the entries that cannot be read are
    /// listed whatever it says (their type and tags cannot be read). With `limit`, one page of
    /// at most `limit` of those records in run order, those after the record `after`, which
    /// `filter` need not let through (``ReadOnlyPersistentStore/pendingRecords(after:limit:)``):
    /// the records are read one at a time and only the page is kept, filtered or not. The text
    /// ends with the command for the next page, filters included.
    func list(limit: Int? = nil, after: String? = nil, filter: RecordFilter = RecordFilter()) throws {
        let reader = try readOnlyStore()
        var list: ReadOnlyPersistentStore.RecordList
        if let limit {
            let cursor = try after.map { id -> StoredOperationRecord in
                guard let operationID = PersistentOperationID(id), let record = try reader.pendingRecordForCursor(withID: operationID) else {
                    throw InspectorError.failure("no pending record has the identifier \(id) in \(store.path) (it may have run since)")
                }
                return record
            }
            let isIncluded: ((StoredOperationRecord) -> Bool)? = filter.isEmpty ? nil : { filter.includes($0) }
            list = try reader.pendingRecords(after: cursor, limit: limit, where: isIncluded)
        } else {
            list = try reader.pendingRecords()
            list.records = list.records.filter(filter.includes)
        }
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("pending", .array(list.records.map(RecordPresentation.summary))),
                ("unreadable", .array(Self.json(list.unreadable, area: "pending"))),
            ]).rendered(pretty: true))
            return
        }
        var table = TextTable(headers: [
            "ID", "TYPE", "STATE", "PRIORITY", "RETRIES", "ATTEMPTS", "NEXT ATTEMPT", "TAGS", "UNIQUE KEY", "DUE", "REPEATS",
        ])
        for record in list.records {
            table.append([
                record.id.rawValue, record.typeIdentifier, RecordPresentation.name(of: record.state),
                "\(record.priority)", "\(record.numberOfRetries)", "\(record.numberOfAttempts)",
                RecordPresentation.nextAttemptText(of: record),
                RecordPresentation.tagsText(record.tags), record.uniqueKey ?? "-",
                RecordPresentation.dueText(of: record), RecordPresentation.repeatText(of: record),
            ])
        }
        let what = "\(list.records.count) pending \(list.records.count == 1 ? "record" : "records") in \(store.path)\(Self.matching(filter))"
        print(limit == nil ? what : "\(what)\(after.map { " after \($0)" } ?? ""), at most \(limit!)")
        if !list.records.isEmpty { print(table.rendered()) }
        printUnreadable(list.unreadable, area: "pending")
        if let limit, list.records.count == limit, let last = list.records.last {
            let command = ["store-inspector", "list", store.path, "--limit", "\(limit)", "--after", last.id.rawValue] + filter.arguments
            print("next page: " + command.map(InspectorCommand.shellWord).joined(separator: " "))
        }
    }

    /// ` matching --type T --tag A`: what the text says of a filter (nothing when it is empty).
    static func matching(_ filter: RecordFilter) -> String {
        filter.isEmpty ? "" : " matching " + filter.arguments.map(InspectorCommand.shellWord).joined(separator: " ")
    }

    /// Prints every field of one pending or failed record, and its payload. `id` is
    /// already in its stored (uppercase) form when it is an identifier at all. In text, a
    /// record that is due reads `due: now` (its JSON `due` is `null`, as its `nextAttempt` is).
    func show(_ id: String) throws {
        let reader = try readOnlyStore()
        let areas = [("pending", try reader.pendingRecords()), ("failed", try reader.failedRecords())].map { area, list in
            AreaContents(area: area, records: list.records, unreadable: list.unreadable.map { ($0.name, $0.reason) })
        }
        guard let (record, _) = try findRecord(id, in: areas, identifier: \.id.rawValue) else {
            throw InspectorError.failure("no pending or failed record has the identifier \(id) in \(store.path)")
        }
        // In a lane: the pending records of the lane added before it (the lane runs in
        // enqueue order).
        let lanePosition = record.area == .pending ? record.lane.map { lane in
            areas[0].records.filter { $0.lane == lane && $0.enqueueSequence < record.enqueueSequence }.count
        } : nil
        let details = RecordPresentation.details(of: record, lanePosition: lanePosition)
        if json {
            print(details.rendered(pretty: true))
        } else if case .object(let members) = details {
            let width = members.map(\.0.count).max() ?? 0
            for (key, value) in members {
                let text = switch value {
                case _ where key == "due": RecordPresentation.dueText(of: record)
                case .string(let string): string
                case .null: "-"
                default: value.rendered(pretty: true)
                }
                print((key + ":").padding(toLength: width + 2, withPad: " ", startingAt: 0) + text)
            }
        }
    }

    /// What one area of the store holds, for ``findRecord(_:in:identifier:)``.
    struct AreaContents<Record> {
        /// `pending` or `failed`.
        var area: String
        var records: [Record]
        /// The entries that cannot be read: name and reason.
        var unreadable: [(name: String, reason: String)]
    }

    /// The record `id` names and the area it is in, as `show` and `export` look for it: in
    /// each area in turn (the pending area, then the failed one), by its stored (uppercase)
    /// identifier. `nil` when no area has it.
    ///
    /// - Throws: ``InspectorError`` when an entry of that identifier cannot be read, with the reason.
    func findRecord<Record>(_ id: String, in areas: [AreaContents<Record>], identifier: (Record) -> String) throws -> (record: Record, area: String)? {
        for contents in areas {
            if let record = contents.records.first(where: { identifier($0) == id }) { return (record, contents.area) }
            if let entry = contents.unreadable.first(where: { $0.name.uppercased().hasPrefix(id.uppercased()) }) {
                throw InspectorError.failure("the \(contents.area) record \(entry.name) cannot be read: \(entry.reason)")
            }
        }
        return nil
    }

    /// Prints the failed area: each record `filter` lets through (by type and tags), with the
    /// reason it failed, and the entries that cannot be read. With `payloads`, the JSON of each
    /// record ends with its payload as `show` presents it; without, it is what it always was.
    func failed(filter: RecordFilter = RecordFilter(), payloads: Bool = false) throws {
        var list = try readOnlyStore().failedRecords()
        list.records = list.records.filter(filter.includes)
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("failed", .array(list.records.map(payloads ? RecordPresentation.summaryWithPayload : RecordPresentation.summary))),
                ("unreadable", .array(Self.json(list.unreadable, area: "failed"))),
            ]).rendered(pretty: true))
            return
        }
        var table = TextTable(headers: ["ID", "TYPE", "RETRIES", "ATTEMPTS", "TAGS", "UNIQUE KEY", "REASON"])
        for record in list.records {
            table.append([
                record.id.rawValue, record.typeIdentifier, "\(record.numberOfRetries)", "\(record.numberOfAttempts)",
                RecordPresentation.tagsText(record.tags), record.uniqueKey ?? "-",
                record.failureReason ?? "-",
            ])
        }
        print("\(list.records.count) failed \(list.records.count == 1 ? "record" : "records") in \(store.path)\(Self.matching(filter))")
        if !list.records.isEmpty { print(table.rendered()) }
        printUnreadable(list.unreadable, area: "failed")
    }

    /// Prints entries a read-only load left where they are, when there are any.
    func printUnreadable(_ entries: [ReadOnlyPersistentStore.UnreadableEntry], area: String) {
        guard !entries.isEmpty else { return }
        print("\(entries.count) unreadable \(entries.count == 1 ? "entry" : "entries"), left in place (an app that opens the store quarantines corrupt ones):")
        for line in Self.lines(entries, area: area) { print(line) }
    }
}
