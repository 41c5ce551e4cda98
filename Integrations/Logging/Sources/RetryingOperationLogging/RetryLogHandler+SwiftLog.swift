import Logging
import RetryingOperation

extension RetryLogHandler {
    /// A handler that logs each message to `logger`, with the operation in the `operation`
    /// metadata field and the message's structured fields (`RetryLogHandler.Message.metadata`:
    /// `attempt`, `outcome`, `duration`, `operation_id`, `type`, …) as metadata of their own.
    ///
    /// Levels map one to one (`debug`, `info`, `warning`, `error`). Messages below the lower of
    /// `minimumLevel` and the logger's own level are dropped before they are formatted.
    ///
    /// Give it to each operation, to a queue's own messages, and to the operations a
    /// `PersistentOperationQueue` restores:
    ///
    /// ```swift
    /// let logger = Logger(label: "thumbnails")
    /// var configuration = PersistentOperationQueue.Configuration()
    /// configuration.logHandler = .swiftLog(logger)            // the queue's messages
    /// configuration.operationLogHandler = .swiftLog(logger)   // its operations', restored ones too
    /// ```
    ///
    /// - Parameters:
    ///   - logger: Where the messages go.
    ///   - minimumLevel: The lowest level passed on. Default: the logger's level, mapped.
    public static func swiftLog(_ logger: Logger, minimumLevel: Level? = nil) -> RetryLogHandler {
        let loggerLevel = Self.level(for: logger.logLevel)
        return RetryLogHandler(minimumLevel: max(minimumLevel ?? loggerLevel, loggerLevel)) { message in
            var metadata: Logger.Metadata = ["operation": "\(message.operationDescription)"]
            for (key, value) in message.metadata { metadata[key] = "\(value)" }
            logger.log(level: Self.swiftLogLevel(for: message.level), "\(message.text)", metadata: metadata)
        }
    }

    /// The swift-log level of a message of `level`.
    public static func swiftLogLevel(for level: Level) -> Logger.Level {
        switch level {
        case .debug: return .debug
        case .info: return .info
        case .warning: return .warning
        case .error: return .error
        }
    }

    /// The lowest level that passes a logger whose level is `level` (trace passes everything;
    /// notice, warning; critical, error).
    static func level(for level: Logger.Level) -> Level {
        switch level {
        case .trace, .debug: return .debug
        case .info: return .info
        case .notice, .warning: return .warning
        case .error, .critical: return .error
        }
    }
}
