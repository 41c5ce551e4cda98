import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Letters: operations another process adds to a store without its lock.
//
//     <directory>/inbox/<name>.letter     operations to add, a binary property list, written
//                                         whole, flushed and renamed into place
//     <directory>/inbox/<name>.rejected   a letter the queue cannot take in (kept for people)
//
// A producer (`PersistentOperationInbox`, in an app extension) encodes its operations' payloads
// itself and leaves one letter per add: durable when the add returns, as a queue's own add. The
// queue that holds the store takes each letter in, oldest first: it stores the letter's
// operations as one batch with the idempotency key `inbox:<name>` (or the letter's own key),
// removes the letter, and only then schedules them. A crash before the removal leaves the
// records pending and never started, so the next take-in finds the key and stores nothing:
// a letter is taken in once. A letter that names a type the queue has not registered, or a
// letter format it does not know, waits (with the later letters of its producer, so that a
// producer's order holds); one that cannot be read at all is renamed `.rejected`.
//
// Letter names start with the time in microseconds (16 hexadecimal digits, increasing within
// a process), so that the names sort in the order the letters were written, then a random part.

extension StoreInbox {
    /// Operations another process adds: what one ``PersistentOperationInbox`` add wrote.
    package struct Letter: Codable, Sendable, Equatable {
        /// One operation of a letter.
        package struct Operation: Codable, Sendable, Equatable {
            package var typeIdentifier: String
            package var payloadVersion: Int
            /// The payload, encoded as a record holds it.
            package var payload: Data
            /// `Operation.queuePriority.rawValue`.
            package var priority: Int
            /// The operations of the letter it depends on, by position.
            package var prerequisites: [Int]

            package init(typeIdentifier: String, payloadVersion: Int, payload: Data, priority: Int, prerequisites: [Int]) {
                self.typeIdentifier = typeIdentifier
                self.payloadVersion = payloadVersion
                self.payload = payload
                self.priority = priority
                self.prerequisites = prerequisites
            }
        }

        /// The options of a letter: those of `EnqueueOptions` a batch takes.
        package struct Options: Codable, Sendable, Equatable {
            package var notBefore: Date?
            package var tags: [String] = []
            package var expirationDate: Date?
            package var conditions: [String] = []
            package var lane: String?
            package var holdsLaneOnFailure = false
            package var idempotencyKey: String?

            package init(_ options: EnqueueOptions) {
                notBefore = options.notBefore
                tags = options.tags.sorted()
                expirationDate = options.expirationDate
                conditions = options.conditions.sorted()
                lane = options.lane
                holdsLaneOnFailure = options.holdsLaneOnFailure
                idempotencyKey = options.idempotencyKey
            }

            /// The options as the queue takes them.
            package var enqueueOptions: EnqueueOptions {
                EnqueueOptions(
                    notBefore: notBefore, tags: Set(tags), expirationDate: expirationDate, conditions: Set(conditions),
                    lane: lane, holdsLaneOnFailure: holdsLaneOnFailure, idempotencyKey: idempotencyKey
                )
            }
        }

        /// The letter format; a queue leaves a letter of a version it does not know waiting.
        package var formatVersion = StoreInbox.letterFormatVersion
        /// Who wrote it, for order and for people: a producer's letters are taken in in order.
        package var producer: String
        package var operations: [Operation]
        package var options: Options

        package init(producer: String, operations: [Operation], options: Options) {
            self.producer = producer
            self.operations = operations
            self.options = options
        }
    }

    /// The letter format this library writes and reads.
    package static let letterFormatVersion = 1
    /// The largest letter: 16 MiB.
    package static let maximumLetterSize = 16 << 20
    static let letterExtension = ".letter"
    static let rejectedExtension = ".rejected"

    /// Leaves `letter` for the queue, durably (written, flushed, renamed into place, the
    /// directory flushed), creating the store directory and its inbox when missing; returns
    /// its name.
    ///
    /// - Throws: ``PersistenceError/Code/recordTooLarge`` for a letter of more than
    ///   ``maximumLetterSize`` bytes, ``PersistenceError/Code/directoryUnavailable`` or
    ///   ``PersistenceError/Code/writeFailed`` when the disk fails. After an error no letter
    ///   was left.
    package func send(_ letter: Letter) throws -> String {
        let bytes: Data
        do {
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .binary
            bytes = try encoder.encode(letter)
        } catch {
            throw PersistenceError(.payloadNotEncodable, "The letter cannot be encoded: \(error)", underlyingError: error)
        }
        guard bytes.count <= Self.maximumLetterSize else {
            throw PersistenceError(
                .recordTooLarge,
                "These operations need \(bytes.count) bytes, more than a letter's \(Self.maximumLetterSize); add them in smaller batches."
            )
        }
        try StoreLayout(directory: URL(fileURLWithPath: (path as NSString).deletingLastPathComponent)).createDirectories(fileSystem: fileSystem, areas: [])
        try create()
        return try leave(bytes, withExtension: Self.letterExtension, what: "the operations")
    }

    /// The names of the letters waiting, oldest first.
    package func letterNames() -> [String] {
        names(withExtension: Self.letterExtension)
    }

    /// Letter `name`, read.
    ///
    /// - Throws: ``PersistenceError/Code/corruptRecord`` when it is not a letter this library
    ///   reads (too large, not a regular file, not a letter), ``PersistenceError/Code/readFailed``
    ///   when it cannot be read.
    package func letter(named name: String) throws -> Letter {
        let file = name + Self.letterExtension
        let result: DurableFile.ReadResult
        do {
            result = try DurableFile(fileSystem: fileSystem).read(path + "/" + file, maximumSize: Self.maximumLetterSize)
        } catch {
            throw PersistenceError(.readFailed, "Cannot read \(file) in the store's inbox.", underlyingError: error)
        }
        guard case .contents(let bytes) = result else {
            throw PersistenceError(.corruptRecord, "\(file) is not a regular file of at most \(Self.maximumLetterSize) bytes.")
        }
        do {
            return try PropertyListDecoder().decode(Letter.self, from: bytes)
        } catch {
            throw PersistenceError(.corruptRecord, "\(file) is not a letter this library reads: \(error)", underlyingError: error)
        }
    }

    /// Removes letter `name` (taken in), durably.
    ///
    /// - Throws: ``PersistenceError/Code/writeFailed`` when it cannot be removed.
    package func removeLetter(named name: String) throws {
        do {
            try fileSystem.unlink(path + "/" + name + Self.letterExtension)
            try fileSystem.synchronizeDirectory(path)
        } catch {
            throw PersistenceError(.writeFailed, "Cannot remove \(name)\(Self.letterExtension) from the store's inbox.", underlyingError: error)
        }
    }

    /// Renames letter `name` to `<name>.rejected`: it is kept, and never taken in.
    package func rejectLetter(named name: String) throws {
        do {
            try fileSystem.rename(path + "/" + name + Self.letterExtension, path + "/" + name + Self.rejectedExtension)
            try fileSystem.synchronizeDirectory(path)
        } catch {
            throw PersistenceError(.writeFailed, "Cannot set \(name)\(Self.letterExtension) aside in the store's inbox.", underlyingError: error)
        }
    }

    /// The names of the letters set aside as rejected, oldest first.
    package func rejectedLetterNames() -> [String] {
        names(withExtension: Self.rejectedExtension)
    }
}
