import Foundation

extension OperationRecord {
    /// The record as the property-list dictionary stored in a record file body of its
    /// ``OperationRecord/formatVersion``: from version 5 on, the fields whose value is their
    /// default (priority 0, no tags, no retries, no attempts, none in flight) are left out.
    var propertyListValue: PropertyListValue {
        let omitsDefaults = formatVersion >= 5
        var entries: [String: PropertyListValue] = [
            "formatVersion": .integer(Int64(formatVersion)),
            "id": .string(id),
            "typeIdentifier": .string(typeIdentifier),
            "payload": .data(payload),
            "enqueueSequence": .unsigned(enqueueSequence),
            "enqueuedAt": .date(enqueuedAt),
        ]
        if !omitsDefaults || priority != 0 { entries["priority"] = .integer(Int64(priority)) }
        if !omitsDefaults || !tags.isEmpty { entries["tags"] = .array(tags.map { .string($0) }) }
        if !omitsDefaults || numberOfRetries != 0 { entries["numberOfRetries"] = .integer(Int64(numberOfRetries)) }
        if !omitsDefaults || numberOfAttempts != 0 { entries["numberOfAttempts"] = .integer(Int64(numberOfAttempts)) }
        if !omitsDefaults || attemptsInFlight != 0 { entries["attemptsInFlight"] = .integer(Int64(attemptsInFlight)) }
        entries["notBefore"] = notBefore.map { .date($0) }
        entries["uniqueKey"] = uniqueKey.map { .string($0) }
        entries["nextAttemptAt"] = nextAttemptAt.map { .date($0) }
        entries["lastErrorDescription"] = lastErrorDescription.map { .string($0) }
        entries["failureReason"] = failureReason.map { .string($0) }
        if formatVersion >= 2 {
            if !prerequisites.isEmpty { entries["prerequisites"] = .array(prerequisites.map { .string($0) }) }
            entries["batchID"] = batchID.map { .string($0) }
            entries["failedPrerequisite"] = failedPrerequisite.map { .string($0) }
        }
        if formatVersion >= 3 {
            entries["expiresAt"] = expiresAt.map { .date($0) }
            if !conditions.isEmpty { entries["conditions"] = .array(conditions.map { .string($0) }) }
        }
        if formatVersion >= 4, let repeatInterval {
            entries["repeatInterval"] = .real(repeatInterval)
            if repeatFlex != 0 { entries["repeatFlex"] = .real(repeatFlex) }
            entries["periodTarget"] = periodTarget.map { .date($0) }
            if completedPeriods != 0 { entries["completedPeriods"] = .integer(Int64(completedPeriods)) }
        }
        if payloadVersion != 1 { entries["payloadVersion"] = .integer(Int64(payloadVersion)) }
        entries["idempotencyKey"] = idempotencyKey.map { .string($0) }
        if let progressUnits {
            entries["progressCompleted"] = .integer(progressUnits.completed)
            entries["progressTotal"] = .integer(progressUnits.total)
        }
        if formatVersion >= 6 {
            entries["lane"] = lane.map { .string($0) }
            if laneHoldsOnFailure { entries["laneHoldsOnFailure"] = .bool(true) }
            if isHoldingLane { entries["isHoldingLane"] = .bool(true) }
        }
        return .dictionary(entries)
    }

    /// Reads a record from a verified property-list body of format `headerVersion`; unknown
    /// keys are ignored, and so are the keys of a later version in an earlier version's body.
    ///
    /// - Throws: ``PersistenceError/Code/corruptRecord`` naming the first missing or
    ///   mistyped field.
    init(propertyListValue value: PropertyListValue, headerVersion: Int) throws {
        guard case .dictionary(let dictionary) = value else {
            throw Self.invalid("the body is not a dictionary")
        }
        try self.init(fields: Fields(dictionary.lazy.map { ($0.key, $0.value) }), headerVersion: headerVersion)
    }

    /// Reads a record from the values of a verified property-list body's top dictionary, by
    /// key (``BinaryPropertyListReader/topLevelValues(from:forKeys:)`` with
    /// ``Fields/keyTable``); see ``init(propertyListValue:headerVersion:)``.
    init(fieldValues values: [PropertyListValue?], headerVersion: Int) throws {
        try self.init(fields: Fields(values: values), headerVersion: headerVersion)
    }

    /// The values of a body's known keys: each entry's key is looked up once as the entries
    /// are read, and each field then read by its position (a record is read field by field,
    /// about 25 reads, most of them of absent fields).
    struct Fields {
        /// A field a record body may hold (its key is ``name``).
        enum Key: Int, CaseIterable {
            case formatVersion, id, typeIdentifier, payload, priority, enqueueSequence, enqueuedAt, notBefore, tags, uniqueKey, numberOfRetries, numberOfAttempts, nextAttemptAt, attemptsInFlight, lastErrorDescription, failureReason, prerequisites, batchID, failedPrerequisite, expiresAt, conditions, repeatInterval, repeatFlex, periodTarget, completedPeriods, lane, laneHoldsOnFailure, isHoldingLane, payloadVersion, idempotencyKey, progressCompleted, progressTotal

            /// The key in the property list.
            var name: String { Self.names[rawValue] }

            private static let names = allCases.map { String(describing: $0) }
            fileprivate static let byName = Dictionary(uniqueKeysWithValues: allCases.map { ($0.name, $0) })
        }

        /// The keys, by ``Key/rawValue``, for ``BinaryPropertyListReader/topLevelValues(from:forKeys:)``.
        static let keyTable = BinaryPropertyListReader.KeyTable(Key.allCases.map(\.name))

        private var values: [PropertyListValue?] = Array(repeating: nil, count: Key.allCases.count)

        init<Entries: Sequence<(String, PropertyListValue)>>(_ entries: Entries) {
            for (name, value) in entries {
                if let key = Key.byName[name] { values[key.rawValue] = value }
            }
        }

        /// The values read by ``keyTable``: one for each ``Key``, in order.
        init(values: [PropertyListValue?]) {
            precondition(values.count == Key.allCases.count, "one value for each key")
            self.values = values
        }

        subscript(key: Key) -> PropertyListValue? { values[key.rawValue] }
    }

    private init(fields entries: Fields, headerVersion: Int) throws {
        func required<T>(_ key: Fields.Key, _ convert: (PropertyListValue) -> T?) throws -> T {
            guard let entry = entries[key] else { throw Self.invalid("field \"\(key.name)\" is missing") }
            guard let converted = convert(entry) else { throw Self.invalid("field \"\(key.name)\" has the wrong type") }
            return converted
        }
        func optional<T>(_ key: Fields.Key, _ convert: (PropertyListValue) -> T?) throws -> T? {
            guard entries[key] != nil else { return nil }
            return try required(key, convert)
        }
        func optionalIdentifier(_ key: Fields.Key) throws -> String? {
            let value = try optional(key, \.stringValue)
            if let value, !Self.isValidIdentifier(value) {
                throw Self.invalid("field \"\(key.name)\" is not a library-generated UUID")
            }
            return value
        }
        let formatVersion = try required(.formatVersion, \.intValue)
        guard formatVersion == headerVersion else {
            throw Self.invalid("body format version \(formatVersion) does not match the header")
        }
        let id = try required(.id, \.stringValue)
        guard Self.isValidIdentifier(id) else { throw Self.invalid("field \"id\" is not a library-generated UUID") }
        func strings(_ value: PropertyListValue) -> [String]? {
            guard case .array(let elements) = value else { return nil }
            let strings = elements.compactMap(\.stringValue)
            return strings.count == elements.count ? strings : nil
        }
        // Required up to version 4; from version 5 on, absent when it has its default value.
        func defaulted<T>(_ key: Fields.Key, _ defaultValue: T, _ convert: (PropertyListValue) -> T?) throws -> T {
            formatVersion >= 5 ? try optional(key, convert) ?? defaultValue : try required(key, convert)
        }
        let tags = try defaulted(.tags, [], strings)
        var prerequisites: [String] = []
        var batchID: String?
        var failedPrerequisite: String?
        if formatVersion >= 2 {
            prerequisites = try optional(.prerequisites, strings) ?? []
            guard prerequisites.allSatisfy(Self.isValidIdentifier) else {
                throw Self.invalid("field \"prerequisites\" holds an identifier that is not a library-generated UUID")
            }
            batchID = try optionalIdentifier(.batchID)
            failedPrerequisite = try optionalIdentifier(.failedPrerequisite)
        }
        let expiresAt = formatVersion >= 3 ? try optional(.expiresAt, \.dateValue) : nil
        let conditions = formatVersion >= 3 ? try optional(.conditions, strings) ?? [] : []
        var repeatInterval: Double?
        var repeatFlex = 0.0
        var periodTarget: Date?
        var completedPeriods = 0
        if formatVersion >= 4 {
            repeatInterval = try optional(.repeatInterval, \.realValue)
            repeatFlex = try optional(.repeatFlex, \.realValue) ?? 0
            periodTarget = try optional(.periodTarget, \.dateValue)
            completedPeriods = try optional(.completedPeriods, \.intValue) ?? 0
            if let interval = repeatInterval {
                guard interval.isFinite, interval > 0 else { throw Self.invalid("field \"repeatInterval\" is not a positive number of seconds") }
                guard repeatFlex.isFinite, repeatFlex >= 0, repeatFlex <= interval else {
                    throw Self.invalid("field \"repeatFlex\" is not between 0 and the interval")
                }
                guard periodTarget != nil else { throw Self.invalid("field \"periodTarget\" is missing from a periodic record") }
            }
            guard completedPeriods >= 0 else { throw Self.invalid("field \"completedPeriods\" is negative") }
        }
        let payloadVersion = try optional(.payloadVersion, \.intValue) ?? 1
        guard payloadVersion >= 1 else { throw Self.invalid("field \"payloadVersion\" is less than 1") }
        var lane: String?
        var laneHoldsOnFailure = false
        var isHoldingLane = false
        if formatVersion >= 6 {
            func flag(_ value: PropertyListValue) -> Bool? {
                if case .bool(let flag) = value { return flag }
                return nil
            }
            lane = try optional(.lane, \.stringValue)
            laneHoldsOnFailure = try optional(.laneHoldsOnFailure, flag) ?? false
            isHoldingLane = try optional(.isHoldingLane, flag) ?? false
            guard lane.map({ !$0.isEmpty }) ?? !(laneHoldsOnFailure || isHoldingLane) else {
                throw Self.invalid("field \"lane\" is empty, or missing from a record that holds its lane")
            }
        }
        self.init(
            id: id,
            typeIdentifier: try required(.typeIdentifier, \.stringValue),
            payload: try required(.payload, \.dataValue),
            priority: try defaulted(.priority, 0, \.intValue),
            enqueueSequence: try required(.enqueueSequence, \.unsignedValue),
            enqueuedAt: try required(.enqueuedAt, \.dateValue),
            notBefore: try optional(.notBefore, \.dateValue),
            tags: tags,
            uniqueKey: try optional(.uniqueKey, \.stringValue),
            numberOfRetries: try defaulted(.numberOfRetries, 0, \.intValue),
            numberOfAttempts: try defaulted(.numberOfAttempts, 0, \.intValue),
            nextAttemptAt: try optional(.nextAttemptAt, \.dateValue),
            attemptsInFlight: try defaulted(.attemptsInFlight, 0, \.intValue),
            lastErrorDescription: try optional(.lastErrorDescription, \.stringValue),
            failureReason: try optional(.failureReason, \.stringValue),
            prerequisites: prerequisites,
            batchID: batchID,
            failedPrerequisite: failedPrerequisite,
            expiresAt: expiresAt,
            conditions: conditions,
            repeatInterval: repeatInterval,
            repeatFlex: repeatFlex,
            periodTarget: periodTarget,
            completedPeriods: completedPeriods,
            lane: lane,
            laneHoldsOnFailure: laneHoldsOnFailure,
            isHoldingLane: isHoldingLane,
            payloadVersion: payloadVersion,
            idempotencyKey: try optional(.idempotencyKey, \.stringValue),
            progressUnits: try optional(.progressCompleted, \.int64Value).flatMap { completed in
                try optional(.progressTotal, \.int64Value).map { ProgressUnits(completed: completed, total: $0) }
            }
        )
        self.formatVersion = formatVersion
    }

    private static func invalid(_ reason: String) -> PersistenceError {
        PersistenceError(.corruptRecord, "The record file is corrupt (\(reason)); it cannot be read.")
    }
}
