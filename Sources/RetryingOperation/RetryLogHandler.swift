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

        public var description: String { "[\(level)] \(operationDescription): \(text)" }

        package init(level: Level, text: String, operationDescription: String) {
            self.level = level
            self.text = text
            self.operationDescription = operationDescription
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
}
