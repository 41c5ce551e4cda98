import Foundation
import PersistentOperations

/// The reading commands: `list`, `show` and `failed`.
extension StoreInspector {
    /// Prints the pending records in run order, then the entries that could not be read.
    ///
    ///     ID                                    TYPE         PRIORITY  RETRIES  ATTEMPTS  NEXT ATTEMPT              TAGS  UNIQUE KEY
    ///     0B9D…                                 demo.upload  0         1        2         2025-11-21T21:28:00.125Z  -     upload-1
    func list() throws {
        let report = try readOnlyStore().loadPending()
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("pending", .array(report.records.map(RecordPresentation.summary))),
                ("unreadable", .array(Self.json(report.skipped, area: "pending"))),
            ]).rendered(pretty: true))
            return
        }
        var table = TextTable(headers: ["ID", "TYPE", "PRIORITY", "RETRIES", "ATTEMPTS", "NEXT ATTEMPT", "TAGS", "UNIQUE KEY"])
        for record in report.records {
            table.append([
                record.id, record.typeIdentifier, "\(record.priority)", "\(record.numberOfRetries)", "\(record.numberOfAttempts)",
                RecordPresentation.nextAttempt(of: record).map(RecordPresentation.text) ?? "now",
                record.tags.isEmpty ? "-" : record.tags.joined(separator: ","), record.uniqueKey ?? "-",
            ])
        }
        print("\(report.records.count) pending \(report.records.count == 1 ? "record" : "records") in \(store.path)")
        if !report.records.isEmpty { print(table.rendered()) }
        printUnreadable(report.skipped, area: "pending")
    }

    /// Prints every field of one pending or failed record, and its payload.
    func show(_ id: String) throws {
        let reader = try readOnlyStore()
        for (area, report) in [("pending", try reader.loadPending()), ("failed", try reader.loadFailed())] {
            if let record = report.records.first(where: { $0.id == id }) {
                let details = RecordPresentation.details(of: record, area: area, attemptsInFlight: reader.attemptsInFlight()[id] ?? 0)
                if json {
                    print(details.rendered(pretty: true))
                } else if case .object(let members) = details {
                    let width = members.map(\.0.count).max() ?? 0
                    for (key, value) in members {
                        let text = switch value {
                        case .string(let string): string
                        case .null: "-"
                        default: value.rendered(pretty: true)
                        }
                        print((key + ":").padding(toLength: width + 2, withPad: " ", startingAt: 0) + text)
                    }
                }
                return
            }
            if let entry = report.skipped.first(where: { $0.name.hasPrefix(id) }) {
                throw InspectorError.failure("the \(area) record \(entry.name) cannot be read: \(entry.reason)")
            }
        }
        throw InspectorError.failure("no pending or failed record has the identifier \(id) in \(store.path)")
    }

    /// Prints the failed area: each record with the reason it failed.
    func failed() throws {
        let report = try readOnlyStore().loadFailed()
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("failed", .array(report.records.map(RecordPresentation.summary))),
                ("unreadable", .array(Self.json(report.skipped, area: "failed"))),
            ]).rendered(pretty: true))
            return
        }
        var table = TextTable(headers: ["ID", "TYPE", "RETRIES", "ATTEMPTS", "TAGS", "UNIQUE KEY", "REASON"])
        for record in report.records {
            table.append([
                record.id, record.typeIdentifier, "\(record.numberOfRetries)", "\(record.numberOfAttempts)",
                record.tags.isEmpty ? "-" : record.tags.joined(separator: ","), record.uniqueKey ?? "-",
                record.failureReason ?? "-",
            ])
        }
        print("\(report.records.count) failed \(report.records.count == 1 ? "record" : "records") in \(store.path)")
        if !report.records.isEmpty { print(table.rendered()) }
        printUnreadable(report.skipped, area: "failed")
    }

    /// Prints entries a read-only load left where they are, when there are any.
    func printUnreadable(_ entries: [LoadReport.Entry], area: String) {
        guard !entries.isEmpty else { return }
        print("\(entries.count) unreadable \(entries.count == 1 ? "entry" : "entries"), left in place (an app that opens the store quarantines corrupt ones):")
        for line in Self.lines(entries, area: area) { print(line) }
    }
}
