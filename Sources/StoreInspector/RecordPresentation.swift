import Foundation
import PersistentOperations

/// How the inspector shows records, their payloads and dates, in text and in JSON.
enum RecordPresentation {
    /// `2025-11-21T21:28:00.125Z`, or `-` for `nil`.
    static func text(_ date: Date?) -> String {
        guard let date else { return "-" }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    static func json(_ date: Date?) -> JSONValue {
        date.map { .string(text($0)) } ?? .null
    }

    /// When the record runs next: `-` while an attempt runs or for a failed record (it runs
    /// only if re-queued), else its retry date, else its not-before date, else `now` (due: a
    /// record that waits for a run condition is due too; only the app knows whether it holds).
    static func nextAttemptText(of record: StoredOperationRecord) -> String {
        if record.state == .running || record.area == .failed { return "-" }
        return (record.nextAttemptAt ?? record.notBefore).map(text) ?? "now"
    }

    /// When the record runs next, for JSON: `null` while an attempt runs, for a failed record,
    /// or when it is due.
    static func nextAttempt(of record: StoredOperationRecord) -> Date? {
        record.state == .running || record.area == .failed ? nil : record.nextAttemptAt ?? record.notBefore
    }

    /// When the record may next start (``StoredOperationRecord/dueDate``): `-` while an
    /// attempt runs or for a failed record, `now` when it is due (its dates allow it to start;
    /// prerequisites and run conditions are the app's to judge), else the date.
    static func dueText(of record: StoredOperationRecord) -> String {
        if record.state == .running || record.area == .failed { return "-" }
        return record.dueDate.map(text) ?? "now"
    }

    /// When the record may next start, for JSON: `null` while an attempt runs, for a failed
    /// record, or when it is due (as for `nextAttempt`).
    static func due(of record: StoredOperationRecord) -> Date? {
        record.state == .running || record.area == .failed ? nil : record.dueDate
    }

    /// A number of seconds: whole numbers as integers (`3600`), others as reals (`0.5`).
    static func seconds(_ value: Double?) -> JSONValue {
        guard let value else { return .null }
        if value.rounded() == value, abs(value) < 9_007_199_254_740_992 { return .integer(Int64(value)) }
        return .double(value)
    }

    /// `3600` or `0.5`, for text.
    static func secondsText(_ value: Double) -> String {
        seconds(value).rendered()
    }

    /// How a periodic record repeats, for tables: `every 3600 s`, with `, flex 600 s` when
    /// its periods may start early; `-` for a record that runs once.
    static func repeatText(of record: StoredOperationRecord) -> String {
        guard let schedule = record.repeating else { return "-" }
        var text = "every \(secondsText(schedule.interval)) s"
        if schedule.flex > 0 { text += ", flex \(secondsText(schedule.flex)) s" }
        return text
    }

    /// The periodic fields, the same in `list` and `show`: `repeatEvery` and `flex` in seconds
    /// (`null` for a record that runs once), the current period's target, the periods ended,
    /// and `due` (see ``due(of:)``).
    static func periodicFields(of record: StoredOperationRecord) -> [(String, JSONValue)] {
        [
            ("repeatEvery", seconds(record.repeating?.interval)),
            ("flex", seconds(record.repeating?.flex)),
            ("periodTarget", json(record.periodTarget)),
            ("completedPeriods", .integer(Int64(record.completedPeriods))),
            ("due", json(due(of: record))),
            ("lane", record.lane.map { .string($0) } ?? .null),
            ("holdsLaneOnFailure", .bool(record.holdsLaneOnFailure)),
            ("isHoldingLane", .bool(record.isHoldingLane)),
        ]
    }

    /// A state's stable name (the same in tables and JSON); `-` for a failed record.
    static func name(of state: PersistentOperationInfo.State?) -> String {
        switch state {
        case .scheduled: "scheduled"
        case .queued: "queued"
        case .running: "running"
        case .waitingToRetry: "waitingToRetry"
        case .waitingForPrerequisites: "waitingForPrerequisites"
        case .waitingForConditions: "waitingForConditions"
        case .waitingForLane: "waitingForLane"
        case nil: "-"
        }
    }

    static func ids(_ ids: [PersistentOperationID]) -> JSONValue {
        .array(ids.map { .string($0.rawValue) })
    }

    static func tagsText(_ tags: Set<String>) -> String {
        tags.isEmpty ? "-" : tags.sorted().joined(separator: ",")
    }

    /// The fields `list` and `failed` show, in a stable order. `attempts` counts the attempts
    /// started, in-flight ones included; the periodic fields come last (see ``periodicFields(of:)``).
    static func summary(of record: StoredOperationRecord) -> JSONValue {
        .object(summaryFields(of: record))
    }

    /// The fields of ``summary(of:)`` followed by the record's `payload`, as `show` presents it
    /// (``payload(of:)``), for `failed --json --payload`.
    static func summaryWithPayload(of record: StoredOperationRecord) -> JSONValue {
        .object(summaryFields(of: record) + [("payload", payload(of: record))])
    }

    /// The fields of ``summary(of:)``, in their order.
    private static func summaryFields(of record: StoredOperationRecord) -> [(String, JSONValue)] {
        [
            ("id", .string(record.id.rawValue)),
            ("typeIdentifier", .string(record.typeIdentifier)),
            ("state", record.state == nil ? .null : .string(name(of: record.state))),
            ("priority", .integer(Int64(record.priority))),
            ("retries", .integer(Int64(record.numberOfRetries))),
            ("attempts", .integer(Int64(record.numberOfAttempts))),
            ("attemptsInFlight", .integer(Int64(record.attemptsInFlight))),
            ("nextAttempt", json(nextAttempt(of: record))),
            ("tags", .array(record.tags.sorted().map { .string($0) })),
            ("uniqueKey", .string(record.uniqueKey)),
            ("failureReason", .string(record.failureReason)),
            ("prerequisites", ids(record.prerequisites)),
            ("expiresAt", json(record.expirationDate)),
            ("conditions", .array(record.conditions.map { .string($0) })),
        ] + periodicFields(of: record)
    }

    /// Every field of the record, and its payload decoded generically (see ``payload(of:)``).
    /// `lanePosition`: for a pending record in a lane, how many of the lane's pending records
    /// come before it (0: it is the lane's current operation).
    static func details(of record: StoredOperationRecord, lanePosition: Int? = nil) -> JSONValue {
        .object([
            ("id", .string(record.id.rawValue)),
            ("area", .string(record.area.rawValue)),
            ("state", record.state == nil ? .null : .string(name(of: record.state))),
            ("formatVersion", .integer(Int64(record.formatVersion))),
            ("typeIdentifier", .string(record.typeIdentifier)),
            ("priority", .integer(Int64(record.priority))),
            ("enqueueSequence", .unsignedInteger(record.enqueueSequence)),
            ("enqueuedAt", json(record.enqueuedAt)),
            ("notBefore", json(record.notBefore)),
            ("expiresAt", json(record.expirationDate)),
            ("conditions", .array(record.conditions.map { .string($0) })),
            ("tags", .array(record.tags.sorted().map { .string($0) })),
            ("uniqueKey", .string(record.uniqueKey)),
            ("idempotencyKey", .string(record.idempotencyKey)),
            ("retries", .integer(Int64(record.numberOfRetries))),
            ("attempts", .integer(Int64(record.numberOfAttempts))),
            ("nextAttemptAt", json(record.nextAttemptAt)),
            ("attemptsInFlight", .integer(Int64(record.attemptsInFlight))),
            ("crashes", .integer(Int64(record.crashes))),
            ("kills", .integer(Int64(record.kills))),
            ("runsAlone", .bool(record.runsAlone)),
            ("prerequisites", ids(record.prerequisites)),
            ("dependents", ids(record.dependents)),
            ("failedPrerequisite", .string(record.failedPrerequisite?.rawValue)),
            ("lastError", .string(record.lastErrorDescription)),
            ("failureReason", .string(record.failureReason)),
        ] + periodicFields(of: record) + [
            ("lanePosition", lanePosition.map { .integer(Int64($0)) } ?? .null),
            ("payloadVersion", .integer(Int64(record.payloadVersion))),
            ("payloadBytes", .integer(Int64(record.payload.count))),
            ("payload", payload(of: record)),
        ])
    }

    /// The payload as a generic value, without knowing its Swift type.
    ///
    /// The bytes go through `BinaryPropertyListReader`, which verifies the whole structure
    /// before it builds any value; no Foundation decoder sees them. Payloads are stored inside
    /// a one-key wrapper (`value`), which is removed here. Unverifiable bytes give
    /// `{"unreadable": reason}`.
    static func payload(of record: StoredOperationRecord) -> JSONValue {
        let value: PropertyListValue
        do {
            value = try BinaryPropertyListReader.value(from: record.payload)
        } catch {
            return .object([("unreadable", .string("the payload is not a valid property list: \(error.reason)"))])
        }
        if case .dictionary(let box) = value, box.count == 1, let inner = box["value"] {
            return json(inner)
        }
        return json(value)
    }

    /// A property-list value as JSON: dates as ISO 8601 strings, data as `base64:` strings,
    /// dictionary keys sorted.
    static func json(_ value: PropertyListValue) -> JSONValue {
        switch value {
        case .bool(let value): .bool(value)
        case .integer(let value): .integer(value)
        case .unsignedInteger(let value): .unsignedInteger(value)
        case .real(let value): .double(value)
        case .date(let value): .string(text(value))
        case .data(let value): .string("base64:" + value.base64EncodedString())
        case .string(let value): .string(value)
        case .array(let values): .array(values.map(json))
        case .dictionary(let members): .object(members.sorted { $0.key < $1.key }.map { ($0.key, json($0.value)) })
        }
    }
}
