import Foundation

/// Where a ``RetryingOperation`` sends what it has to say, at or above a minimum level.
///
/// The library keeps no global logger: give each operation a handler (it is a value, so
/// share one) through ``RetryingOperation/logHandler``. The handler is called from any
/// thread, never while the library holds a lock.
///
/// ```swift
/// let log = RetryLogHandler(minimumLevel: .info) { message in
///     logger.info("\(message.operationDescription): \(message.text)")
/// }
/// operation.logHandler = log
/// ```
///
/// Each message also carries its facts as structured fields (``Message/metadata``), for log
/// backends that index them: the attempt number, the outcome, the attempt's duration, and
/// for the operations of a `PersistentOperationQueue`, their identifier and type.
public struct RetryLogHandler: Sendable {
    /// How much a message matters.
    public enum Level: Int, Comparable, Sendable, CustomStringConvertible {
        /// Every attempt start and finish.
        case debug
        /// Retries scheduled, limits reached.
        case info
        /// Calls that were ignored, such as ``RetryingOperation/retryNow()`` while not waiting.
        case warning
        /// Misuse of the API, such as calling `baseOperationEnded` twice.
        case error

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        public var description: String {
            switch self {
            case .debug: return "debug"
            case .info: return "info"
            case .warning: return "warning"
            case .error: return "error"
            }
        }
    }

    /// One log message.
    public struct Message: Sendable, CustomStringConvertible {
        /// How much it matters.
        public let level: Level
        /// What happened, in one sentence.
        public let text: String
        /// The operation's `name`, or its type and identity.
        public let operationDescription: String
        /// The message's facts as structured fields, for log backends that index them; `text`
        /// says the same in prose. Keys, where they apply:
        ///
        /// - `attempt`: the number of the attempt, from 1 (across launches for a stored
        ///   operation); `attempts` on a finish: how many were started.
        /// - `retries`: the counted retries so far.
        /// - `outcome`: `succeeded`, `failed`, `cancelled` or `retry`.
        /// - `counted`: for a retry, whether it counts toward the retry limit (`true`/`false`).
        /// - `delay`: for a retry, the seconds until the next attempt.
        /// - `duration`: the seconds the attempt ran, from its start to its end.
        /// - `error`: the error the attempt ended with.
        /// - `operation_id` and `type`: for an operation of a `PersistentOperationQueue` given
        ///   the queue's `operationLogHandler`, its identifier and type identifier.
        ///
        /// A `PersistentOperationQueue`'s own messages carry counts (`restored`, `quarantined`,
        /// `unknown_types`, `moved_to_failed` after a restore).
        ///
        /// ```swift
        /// let log = RetryLogHandler(minimumLevel: .debug) { message in
        ///     if message.metadata["outcome"] == "failed" {
        ///         print("failed after \(message.metadata["attempts"] ?? "?") attempts: \(message.text)")
        ///     }
        /// }
        /// ```
        public let metadata: [String: String]

        public var description: String { "[\(level)] \(operationDescription): \(text)" }

        package init(level: Level, text: String, operationDescription: String, metadata: [String: String] = [:]) {
            self.level = level
            self.text = text
            self.operationDescription = operationDescription
            self.metadata = metadata
        }

        /// This message with `fields` added to its metadata (its own win on a clash).
        package func adding(_ fields: [String: String]) -> Message {
            Message(level: level, text: text, operationDescription: operationDescription, metadata: metadata.merging(fields) { own, _ in own })
        }
    }

    /// The default ``minimumLevel``: retries and problems, not every attempt.
    public static let defaultMinimumLevel = Level.info

    /// Messages below this level are dropped before they are formatted.
    public var minimumLevel: Level
    private let handler: @Sendable (Message) -> Void

    /// Creates a handler.
    ///
    /// - Parameters:
    ///   - minimumLevel: The lowest level passed on. Defaults to ``defaultMinimumLevel``.
    ///   - handler: Receives each message, on any thread.
    public init(minimumLevel: Level = defaultMinimumLevel, handler: @escaping @Sendable (Message) -> Void) {
        self.minimumLevel = minimumLevel
        self.handler = handler
    }

    /// A handler that prints each message on standard error.
    ///
    /// ```swift
    /// operation.logHandler = .standardError(minimumLevel: .debug)
    /// ```
    public static func standardError(minimumLevel: Level = defaultMinimumLevel) -> RetryLogHandler {
        RetryLogHandler(minimumLevel: minimumLevel) { message in
            FileHandle.standardError.write(Data((message.description + "\n").utf8))
        }
    }

    package func handle(_ message: Message) {
        handler(message)
    }

    /// This handler, adding `fields` to the metadata of every message it passes on.
    package func adding(_ fields: [String: String]) -> RetryLogHandler {
        let handler = self.handler
        return RetryLogHandler(minimumLevel: minimumLevel) { message in handler(message.adding(fields)) }
    }
}
